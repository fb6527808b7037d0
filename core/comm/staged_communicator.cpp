#include "core/comm/staged_communicator.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, DeviceStaging staging,
                                       std::string group)
    : host_(std::move(host)), s_(std::move(staging)), group_(std::move(group)) {
  OSLO_CHECK(host_ && s_.to_host && s_.to_device && s_.host_alloc && s_.host_free,
             OSLO_ERR_INTERNAL, "staged communicator: incomplete staging for group ", group_);
  name_ = std::string("staged/") + host_->transport();
}

StagedCommunicator::~StagedCommunicator() {
  if (buf_) s_.host_free(buf_);
}

void StagedCommunicator::check(const char* call, const char* arg, const void* p,
                               size_t bytes) const {
  if (bytes == 0 || !s_.check) return;
  const std::string why = s_.check(p, bytes);
  if (!why.empty())
    fail(OSLO_ERR_INVALID_ARGUMENT, "communicator of group ", group_, " (", name_, "): ", call,
         " was handed `", arg, "` = ", p, " (", bytes, " bytes), which is not ", s_.backend,
         " memory: ", why,
         " (a communicator takes only its backend's memory; host values go through the "
         "group's control messages)");
}

size_t StagedCommunicator::bytes_of(const char* call, size_t count, oslo_dtype dt,
                                    size_t blocks) const {
  const size_t es = dtype_size(dt);
  if (count > SIZE_MAX / es / blocks)
    fail(OSLO_ERR_INVALID_ARGUMENT, "communicator of group ", group_, " (", name_, "): ", call,
         ": count ", count, " of ", dtype_name(dt), " overflows the byte size of its buffers");
  return count * es;
}

char* StagedCommunicator::stage(size_t bytes) {
  if (bytes > cap_) {
    if (buf_) s_.host_free(buf_);
    buf_ = nullptr;
    cap_ = 0;
    const size_t want = std::max<size_t>(bytes, size_t(64) << 10);
    buf_ = static_cast<char*>(s_.host_alloc(want));
    cap_ = want;
  }
  return buf_;
}

void StagedCommunicator::all_reduce(const void* in, void* out, size_t count, oslo_dtype dt,
                                    oslo_reduce_op op) {
  const size_t bytes = bytes_of("all_reduce", count, dt, 1);
  check("all_reduce", "in", in, bytes);
  check("all_reduce", "out", out, bytes);
  char* h = stage(bytes);
  if (bytes) s_.to_host(h, in, bytes);
  host_->all_reduce(h, h, count, dt, op);
  if (bytes) s_.to_device(out, h, bytes);
}

void StagedCommunicator::all_gather(const void* in, void* out, size_t count, oslo_dtype dt) {
  const size_t n = static_cast<size_t>(size());
  const size_t bytes = bytes_of("all_gather", count, dt, n);
  check("all_gather", "in", in, bytes);
  check("all_gather", "out", out, bytes * n);
  char* h = stage(bytes * n);
  char* mine = h + static_cast<size_t>(rank()) * bytes;
  if (bytes) s_.to_host(mine, in, bytes);
  host_->all_gather(mine, h, count, dt);
  if (bytes) s_.to_device(out, h, bytes * n);
}

void StagedCommunicator::reduce_scatter(const void* in, void* out, size_t count, oslo_dtype dt,
                                        oslo_reduce_op op) {
  const size_t n = static_cast<size_t>(size());
  const size_t bytes = bytes_of("reduce_scatter", count, dt, n + 1);
  check("reduce_scatter", "in", in, bytes * n);
  check("reduce_scatter", "out", out, bytes);
  char* h = stage(bytes * (n + 1));
  char* res = h + bytes * n;
  if (bytes) s_.to_host(h, in, bytes * n);
  host_->reduce_scatter(h, res, count, dt, op);
  if (bytes) s_.to_device(out, res, bytes);
}

void StagedCommunicator::broadcast(void* buf, size_t count, oslo_dtype dt, int root) {
  const size_t bytes = bytes_of("broadcast", count, dt, 1);
  check("broadcast", "buf", buf, bytes);
  char* h = stage(bytes);
  if (bytes && rank() == root) s_.to_host(h, buf, bytes);
  host_->broadcast(h, count, dt, root);
  if (bytes && rank() != root) s_.to_device(buf, h, bytes);
}

void StagedCommunicator::send(const void* buf, size_t bytes, int peer) {
  check("send", "buf", buf, bytes);
  char* h = stage(bytes);
  if (bytes) s_.to_host(h, buf, bytes);
  host_->send(h, bytes, peer);
}

void StagedCommunicator::recv(void* buf, size_t bytes, int peer) {
  check("recv", "buf", buf, bytes);
  char* h = stage(bytes);
  host_->recv(h, bytes, peer);
  if (bytes) s_.to_device(buf, h, bytes);
}

void StagedCommunicator::barrier() {
  host_->barrier();
}

void StagedCommunicator::abort() noexcept {
  host_->abort();
}

}  // namespace oslo
