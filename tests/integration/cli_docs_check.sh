#!/usr/bin/env bash
# The man page and the completion scripts the build wrote (<build dir>/share, from
# cmake/cli_docs.cmake) against the CLI's own options: every option of every command that
# `cusnap <command> --help` lists appears in each of them, every option they name is one of
# the CLI's (nothing stale), and each file is what the built cusnap prints now.
set -euo pipefail
cusnap=$1 share=$2
fail() { echo "FAIL: $*"; exit 1; }
declare -A files=(
  [man]="$share/man/man1/cusnap.1"
  [bash]="$share/bash-completion/completions/cusnap"
  [zsh]="$share/zsh/site-functions/_cusnap"
  [fish]="$share/fish/vendor_completions.d/cusnap.fish")
for kind in "${!files[@]}"; do
  [[ -s ${files[$kind]} ]] || fail "${files[$kind]} was not generated"
done
cmp -s <("$cusnap" man-page) "${files[man]}" || fail "${files[man]} is not what 'cusnap man-page' prints"
for shell in bash zsh fish; do
  cmp -s <("$cusnap" completion "$shell") "${files[$shell]}" ||
    fail "${files[$shell]} is not what 'cusnap completion $shell' prints"
done

# Each script parses in its shell (a shell that is not installed is said and skipped).
bash -n "${files[bash]}" || fail "bash cannot parse ${files[bash]}"
if command -v zsh >/dev/null; then zsh -n "${files[zsh]}" || fail "zsh cannot parse ${files[zsh]}"
else echo "note: no zsh here: ${files[zsh]} not parsed"; fi
if command -v fish >/dev/null; then fish --no-execute "${files[fish]}" || fail "fish cannot parse ${files[fish]}"
else echo "note: no fish here: ${files[fish]} not parsed"; fi
if command -v groff >/dev/null; then
  warnings=$(groff -man -ww -z "${files[man]}" 2>&1) || true
  [[ -z $warnings ]] || fail "groff warns about ${files[man]}: $warnings"
fi

# The man page as text ('\-' is roff's '-'), and each script once (grep -q on a pipe would
# end its writer early: pipefail).
man=$(sed 's/\\-/-/g' "${files[man]}")
bash_text=$(<"${files[bash]}") zsh_text=$(<"${files[zsh]}") fish_text=$(<"${files[fish]}")

# The commands --help lists, and each one's long options as its --help lists them.
commands=$("$cusnap" --help | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
[[ -n $commands ]] || fail "no commands in cusnap --help"
all_options=$("$cusnap" --help | sed -nE 's/^ +(-[a-z],)?(--[a-z][a-z-]*).*/\2/p' | sort -u)
checked=0
for command in $commands; do
  options=$("$cusnap" "$command" --help | sed -nE 's/^ +(-[a-z],)?(--[a-z][a-z-]*).*/\2/p' | sort -u)
  all_options+=$'\n'$options
  grep -qF -- ".SS \"cusnap $command" <<<"$man" || fail "man page: no command $command"
  grep -qE -- "(^| )$command([ )]|$)" <<<"$bash_text" || fail "bash: no command $command"
  grep -qF -- "'$command:" <<<"$zsh_text" || fail "zsh: no command $command"
  grep -qF -- "-a $command " <<<"$fish_text" || fail "fish: no command $command"
  # Each command's own part of each file.
  man_part=$(awk -v c=".SS \"cusnap $command" 'index($0, c) == 1 {on = 1; print; next}
                                                on && /^\.S[SH] / {exit} on' <<<"$man")
  bash_part=$(grep -E "^    $command\) opts=" <<<"$bash_text")
  zsh_part=$(awk -v c="    $command)" '$0 == c {on = 1; next} on {print} on && /;;$/ {exit}' <<<"$zsh_text")
  fish_part=$(grep -F "__fish_seen_subcommand_from $command'" <<<"$fish_text")
  for option in $options; do
    grep -qE -- "^\.B $option( |\$)" <<<"$man_part" || fail "man page: $command $option missing"
    grep -qE -- " $option( |\"|\$)" <<<" ${bash_part#*=\"}" || fail "bash: $command $option missing"
    grep -qF -- "'$option[" <<<"$zsh_part" || fail "zsh: $command $option missing"
    grep -qF -- "-l ${option#--} " <<<"$fish_part" || fail "fish: $command $option missing"
    checked=$((checked + 1))
  done
done
# Nothing stale: each option a script offers is one the CLI has.
all_options=$(sort -u <<<"$all_options")
for shell in bash zsh fish; do
  while read -r option; do
    grep -qxF -- "$option" <<<"$all_options" || fail "$shell offers $option, which cusnap does not have"
  done < <(grep -oE -- "(^|[ '\"])--[a-z][a-z-]*" "${files[$shell]}" | grep -oE -- '--[a-z-]+' | sort -u)
done
while read -r option; do
  grep -qxF -- "$option" <<<"$all_options" || fail "the man page documents $option, which cusnap does not have"
done < <(grep -E '^\.B --' <<<"$man" | grep -oE -- '--[a-z][a-z-]*' | sort -u)
echo "PASS: $checked options of $(wc -w <<<"$commands") commands in the man page and the bash, zsh and fish completions"
