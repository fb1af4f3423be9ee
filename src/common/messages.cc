// The messages of messages.h: each one's encoding and decoding side by side, in the same
// field order.
#include "common/messages.h"

#include <cerrno>
#include <string>

#include "common/wire_codec.h"

namespace cusnap::proto {
namespace {

std::string NameOf(Op op) {
  const char* name = OpName(op);
  return name != kUnknownName ? name : "op " + std::to_string(static_cast<unsigned>(op));
}

Error Malformed(const Message& message) {
  return Error{EPROTO, "protocol: malformed " + NameOf(message.op) + " message (" +
                           std::to_string(message.payload.size()) + " bytes)"};
}

// A successful reply to `op`: status 0, then the fields `put` writes.
template <typename Put>
Message Reply(Op op, Put put) {
  Message message;
  message.op = op;
  Writer out(message.payload);
  out.Put(int32_t{0});
  put(out);
  return message;
}

// Reads a reply to `expected`: an error reply comes back as its Error, a reply for another
// op or one whose payload does not hold exactly the fields `get` reads is EPROTO.
template <typename T, typename Get>
Result<T> ReadReply(const Message& message, Op expected, Get get) {
  if (message.op != expected) {
    return Error{EPROTO, "protocol: the reply to " + NameOf(expected) + " is a reply to " +
                             NameOf(message.op)};
  }
  Reader in(message.payload);
  int32_t status = 0;
  in.Get(status);
  if (status != 0) {
    std::string text;
    in.Get(text);
    if (!in.Complete()) return Malformed(message);
    return Error{status, std::move(text)};
  }
  T value;
  get(in, value);
  if (!in.Complete()) return Malformed(message);
  return value;
}

// A request's payload, read by `get`; EPROTO unless it holds exactly those fields.
template <typename T, typename Get>
Result<T> ReadRequest(const Message& message, Get get) {
  Reader in(message.payload);
  T value;
  get(in, value);
  if (!in.Complete()) return Malformed(message);
  return value;
}

}  // namespace

Message EncodeError(Op op, const Error& error) {
  Message message;
  message.op = op;
  Writer out(message.payload);
  out.Put(int32_t{error.code == 0 ? -1 : error.code});
  out.Put(error.message);
  return message;
}

// ---- kExport ----------------------------------------------------------------------------

Message ExportRequest::Encode() const {
  Message message;
  message.op = Op::kExport;
  Writer out(message.payload);
  out.Put(id);
  out.Put(kind);
  out.Put(capability);
  return message;
}

Result<ExportRequest> ExportRequest::Decode(const Message& message) {
  return ReadRequest<ExportRequest>(message, [](Reader& in, ExportRequest& r) {
    in.Get(r.id);
    in.Get(r.kind);
    in.Get(r.capability);
  });
}

Message ExportReply::Encode() && {
  Message message = Reply(Op::kExport, [&](Writer& out) {
    out.Put(id);
    out.Put(kind);
    out.Put(size);
  });
  message.fd = std::move(fd);
  return message;
}

Result<ExportReply> ExportReply::Decode(Message& message) {
  Result<ExportReply> reply =
      ReadReply<ExportReply>(message, Op::kExport, [](Reader& in, ExportReply& r) {
        in.Get(r.id);
        in.Get(r.kind);
        in.Get(r.size);
      });
  if (reply.ok()) reply->fd = std::move(message.fd);
  return reply;
}

// ---- kHeldAllocations -------------------------------------------------------------------

Message HeldAllocationsRequest::Encode() const {
  Message message;
  message.op = Op::kHeldAllocations;
  Writer out(message.payload);
  out.Put(ids);
  return message;
}

Result<HeldAllocationsRequest> HeldAllocationsRequest::Decode(const Message& message) {
  return ReadRequest<HeldAllocationsRequest>(
      message, [](Reader& in, HeldAllocationsRequest& r) { in.Get(r.ids); });
}

Message HeldAllocationsReply::Encode() const {
  return Reply(Op::kHeldAllocations, [&](Writer& out) { out.Put(held); });
}

Result<HeldAllocationsReply> HeldAllocationsReply::Decode(const Message& message) {
  return ReadReply<HeldAllocationsReply>(
      message, Op::kHeldAllocations, [](Reader& in, HeldAllocationsReply& r) { in.Get(r.held); });
}

// ---- kIdentify --------------------------------------------------------------------------

Message IdentifyRequest::Encode() const {
  Message message;
  message.op = Op::kIdentify;
  return message;
}

Message IdentifyReply::Encode() const {
  return Reply(Op::kIdentify, [&](Writer& out) {
    out.Put(pid);
    out.Put(start_time);
    out.Put(state);
    out.Put(records);
    out.Put(untracked_imports);
    out.Put(tracked_bytes);
    out.Put(created_total);
    out.Put(created_host_numa);
    out.Put(failure);
    out.Put(checkpoint_id);
    out.Put(untracked);
    out.Put(unsupported);
    out.Put(settings);
  });
}

Result<IdentifyReply> IdentifyReply::Decode(const Message& message) {
  return ReadReply<IdentifyReply>(message, Op::kIdentify, [](Reader& in, IdentifyReply& r) {
    in.Get(r.pid);
    in.Get(r.start_time);
    in.Get(r.state);
    in.Get(r.records);
    in.Get(r.untracked_imports);
    in.Get(r.tracked_bytes);
    in.Get(r.created_total);
    in.Get(r.created_host_numa);
    in.Get(r.failure);
    in.Get(r.checkpoint_id);
    in.Get(r.untracked);
    in.Get(r.unsupported);
    in.Get(r.settings);
  });
}

// ---- kInspect ---------------------------------------------------------------------------

Message InspectRequest::Encode() const {
  Message message;
  message.op = Op::kInspect;
  return message;
}

Message InspectReply::Encode() const {
  return Reply(Op::kInspect, [&](Writer& out) {
    out.Put(records);
    out.Put(importers);
    out.Put(device_uuids);
  });
}

Result<InspectReply> InspectReply::Decode(const Message& message) {
  return ReadReply<InspectReply>(message, Op::kInspect, [](Reader& in, InspectReply& r) {
    in.Get(r.records);
    in.Get(r.importers);
    in.Get(r.device_uuids);
  });
}

// ---- kCheckResources --------------------------------------------------------------------

Message ResourcesRequest::Encode() const {
  Message message;
  message.op = Op::kCheckResources;
  Writer out(message.payload);
  out.Put(carrier_bytes);
  out.Put(imports);
  return message;
}

Result<ResourcesRequest> ResourcesRequest::Decode(const Message& message) {
  return ReadRequest<ResourcesRequest>(message, [](Reader& in, ResourcesRequest& r) {
    in.Get(r.carrier_bytes);
    in.Get(r.imports);
  });
}

Message ResourcesReply::Encode() const {
  return Reply(Op::kCheckResources, [&](Writer& out) {
    out.Put(descriptors_free);
    out.Put(cgroup_memory_free);
    out.Put(address_space_free);
    out.Put(carrier_held);
  });
}

Result<ResourcesReply> ResourcesReply::Decode(const Message& message) {
  return ReadReply<ResourcesReply>(message, Op::kCheckResources,
                                   [](Reader& in, ResourcesReply& r) {
                                     in.Get(r.descriptors_free);
                                     in.Get(r.cgroup_memory_free);
                                     in.Get(r.address_space_free);
                                     in.Get(r.carrier_held);
                                   });
}

// ---- Lifecycle steps --------------------------------------------------------------------

Message StepRequest::Encode() const {
  Message message;
  message.op = op;
  Writer out(message.payload);
  out.Put(drain_ms);
  out.Put(checkpoint_id);
  out.Put(lease_ms);
  out.Put(dropped_multicast);
  out.Put(device_map);
  out.Put(static_cast<uint8_t>(held ? 1 : 0));
  out.Put(carrier_path);
  return message;
}

Result<StepRequest> StepRequest::Decode(const Message& message) {
  return ReadRequest<StepRequest>(message, [&](Reader& in, StepRequest& r) {
    r.op = message.op;
    in.Get(r.drain_ms);
    in.Get(r.checkpoint_id);
    in.Get(r.lease_ms);
    in.Get(r.dropped_multicast);
    in.Get(r.device_map);
    uint8_t held = 0;
    in.Get(held);
    r.held = held != 0;
    in.Get(r.carrier_path);
  });
}

Message StepReply::Encode(Op op) const {
  return Reply(op, [&](Writer& out) {
    out.Put(state);
    out.Put(bytes);
    out.Put(copy_ns);
    out.Put(zero_bytes);
    out.Put(static_cast<uint32_t>(files.size()));
    for (const CarrierFile& f : files) {
      out.Put(f.name);
      out.Put(f.bytes);
      out.Put(f.chunks);
    }
  });
}

Result<StepReply> StepReply::Decode(const Message& message, Op op) {
  return ReadReply<StepReply>(message, op, [](Reader& in, StepReply& r) {
    in.Get(r.state);
    in.Get(r.bytes);
    in.Get(r.copy_ns);
    in.Get(r.zero_bytes);
    uint32_t count = 0;
    in.Get(count);
    // A count beyond the payload ends at the first read past it, allocating nothing for it.
    for (uint32_t k = 0; k < count && in.ok(); ++k) {
      CarrierFile f;
      in.Get(f.name);
      in.Get(f.bytes);
      in.Get(f.chunks);
      r.files.push_back(std::move(f));
    }
  });
}

}  // namespace cusnap::proto
