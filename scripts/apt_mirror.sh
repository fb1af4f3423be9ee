# Sourced by the scripts that fetch Debian packages from the machine's own archive
# (fetch_criu.sh, fetch_criu_binary.sh): no archive's host name is written into the project.
#
# The URI of the first enabled entry of apt's sources whose suite is one of Debian's releases
# (a security or updates archive, or a third party's suite, does not serve sid).
apt_debian_mirror() {
  local sourcelist="" sourceparts="" files=() f
  eval "$(apt-config shell sourcelist Dir::Etc::sourcelist/f sourceparts Dir::Etc::sourceparts/d)"
  [[ -n $sourcelist && -f $sourcelist ]] && files+=("$sourcelist")
  if [[ -n $sourceparts && -d $sourceparts ]]; then
    for f in "$sourceparts"/*.list "$sourceparts"/*.sources; do [[ -f $f ]] && files+=("$f"); done
  fi
  ((${#files[@]})) || return 1
  awk '
    function debian_suite(s) {
      return s ~ /^(oldoldstable|oldstable|stable|testing|unstable|sid|experimental|buster|bullseye|bookworm|trixie|forky|duke)$/
    }
    function flush() {  # one deb822 paragraph
      if (types ~ /(^|[ \t])deb(-src)?([ \t]|$)/ && enabled != "no" && uris != "") {
        n = split(suites, s, /[ \t]+/)
        for (i = 1; i <= n; i++) if (debian_suite(s[i])) { split(uris, u, /[ \t]+/); print u[1]; exit }
      }
      types = uris = suites = enabled = ""
    }
    FNR == 1 { flush() }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      if ($0 ~ /^#/) next
      key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^[ \t]+/, "")
      if (key == "types") types = $0
      else if (key == "uris") uris = $0
      else if (key == "suites") suites = $0
      else if (key == "enabled") enabled = tolower($0)
      next
    }
    /^[ \t]*deb(-src)?[ \t]/ {
      sub(/#.*/, ""); sub(/^[ \t]*deb(-src)?[ \t]+/, "")
      if ($0 ~ /^\[/) sub(/^\[[^]]*\][ \t]*/, "")  # [arch=... signed-by=...]
      if (debian_suite($2)) { print $1; exit }
    }
    END { flush() }
  ' "${files[@]}" | sed 's:/*$::' | head -1
}
