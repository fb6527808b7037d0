// Model load: load_placed (any WeightSource into local tensors, through
// the backend), its collective form with failure agreement, run_agreed, and
// the placement helpers shared with save and the offline tools
// (model_io_internal.hpp).
#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "core/checkpoint/model_checkpoint.hpp"
#include "core/checkpoint/model_io_internal.hpp"
#include "core/comm/agreement.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"
#include "core/quant/quant.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

namespace model_io {

// --------------------------------------------------------------------------
// Placement validation
// --------------------------------------------------------------------------

void check_placement(const Placement& p, const std::string& who) {
  const int nd = static_cast<int>(p.global_shape.size());
  OSLO_CHECK(!p.name.empty(), OSLO_ERR_INVALID_ARGUMENT, "placement with an empty name");
  OSLO_CHECK(p.split_dim >= -1 && p.split_dim < nd, OSLO_ERR_INVALID_ARGUMENT, who, ": split_dim ",
             p.split_dim, " is out of range for ", nd, " dimensions");
  for (int64_t d : p.global_shape)
    OSLO_CHECK(d >= 0, OSLO_ERR_INVALID_ARGUMENT, who, ": negative extent in global shape ",
               shape_str(p.global_shape));
  OSLO_CHECK(!p.transpose || nd == 2, OSLO_ERR_INVALID_ARGUMENT, who,
             ": transpose needs a 2-D tensor, the global shape is ", shape_str(p.global_shape));
  if (p.split_dim < 0) {
    OSLO_CHECK(p.segments.empty(), OSLO_ERR_INVALID_ARGUMENT, who,
               ": a replicated placement has no segments");
    return;
  }
  const int64_t G = p.global_shape[p.split_dim];
  OSLO_CHECK(p.local_extent >= 0, OSLO_ERR_INVALID_ARGUMENT, who, ": negative local_extent");
  for (const Segment& s : p.segments) {
    OSLO_CHECK(s.length >= 1 && s.global_start >= 0 && s.global_start <= G - s.length,
               OSLO_ERR_INVALID_ARGUMENT, who, ": segment [", s.global_start, ", ",
               s.global_start + s.length, ") is outside the global extent ", G, " of split_dim ",
               p.split_dim);
    OSLO_CHECK(s.local_start >= 0 && s.local_start <= p.local_extent - s.length,
               OSLO_ERR_INVALID_ARGUMENT, who, ": segment at local [", s.local_start, ", ",
               s.local_start + s.length, ") is outside the local extent ", p.local_extent);
  }
}

std::string seg_key(const Placement& p, const Segment& s) {
  return p.segments.size() == 1 ? p.name : p.name + "@" + std::to_string(s.global_start);
}

std::vector<int64_t> hf_local_shape(const Placement& p) {
  std::vector<int64_t> s = p.global_shape;
  if (p.split_dim >= 0) s[p.split_dim] = p.local_extent;
  return s;
}

uint64_t numel_of(const std::vector<int64_t>& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= static_cast<uint64_t>(d);
  return n;
}

void copy_rows(const std::vector<int64_t>& shape, int dim, int64_t r0, int64_t n, size_t es,
               char* a, char* b, bool a_to_b) {
  size_t outer = 1, inner = es;
  for (int k = 0; k < dim; ++k) outer *= static_cast<size_t>(shape[k]);
  for (size_t k = dim + 1; k < shape.size(); ++k) inner *= static_cast<size_t>(shape[k]);
  const size_t arow = static_cast<size_t>(shape[dim]) * inner,
               brow = static_cast<size_t>(n) * inner;
  for (size_t o = 0; o < outer; ++o) {
    char* pa = a + o * arow + static_cast<size_t>(r0) * inner;
    char* pb = b + o * brow;
    if (a_to_b)
      std::memcpy(pb, pa, brow);
    else
      std::memcpy(pa, pb, brow);
  }
}

}  // namespace model_io

using namespace model_io;

namespace {

// Host staging of a load: at most this much for tensors whose segments are
// contiguous in the local tensor.
constexpr uint64_t kStageBytes = uint64_t{16} << 20;

}  // namespace

// --------------------------------------------------------------------------
// Load
// --------------------------------------------------------------------------

namespace {

// A block-quantized local tensor [R, C] (a linear's weight). When the source
// holds the tensor in the same format and layout, its blocks are copied as
// they are (a cut along the row must fall on block boundaries); otherwise
// the local values are loaded in f32 (a quantized source dequantizes them)
// and quantized on the host, row by row, so a rank only ever quantizes its
// own slice. A tensor held transposed from its Hugging Face layout (GPT-2's
// Conv1D) that the source stores transposed too (a GGUF file's GPT-2
// projections, WeightSource::stored_transposed) is in the same layout: its
// blocks are copied, the placement counted in the stored shape.
void load_block(WeightSource& src, const SourceTensor& t, PlacedTensor& pt, Backend& backend,
                std::vector<char>& stage, uint64_t& staging) {
  Placement p = pt.placement;
  if (p.transpose && t.quantized() && t.quant == pt.tensor.dtype() && src.stored_transposed(t)) {
    std::swap(p.global_shape[0], p.global_shape[1]);
    if (p.split_dim >= 0) p.split_dim = 1 - p.split_dim;
    p.transpose = false;
  }
  const oslo_dtype q = pt.tensor.dtype();
  const std::vector<int64_t>& ls = pt.tensor.shape();
  const std::string who = "tensor " + quote(p.name);
  int64_t be, bb;
  dtype_block(q, &be, &bb);
  OSLO_CHECK(ls.size() == 2 && ls[1] % be == 0, OSLO_ERR_SHAPE, who, ": a ", dtype_name(q),
             " tensor must be 2-D with rows of whole blocks of ", be, ", got ", shape_str(ls));
  const int64_t R = ls[0], C = ls[1];
  const size_t rb = dtype_bytes(q, C), bytes = rb * static_cast<size_t>(R);
  char* dev = static_cast<char*>(pt.tensor.data());
  if (t.quantized() && t.quant == q && !p.transpose) {
    if (stage.size() < 2 * bytes) stage.resize(2 * bytes);
    staging = std::max<uint64_t>(staging, 2 * bytes);
    char* host = stage.data();
    char* seg = stage.data() + bytes;
    std::memset(host, 0, bytes);  // padding rows or blocks
    if (p.split_dim < 0) {
      src.read_box(t, -1, 0, 0, st::Dtype::U8, host);
    } else if (p.split_dim == 0) {
      for (const Segment& s : p.segments)
        src.read_box(t, 0, s.global_start, s.length, st::Dtype::U8,
                     host + static_cast<size_t>(s.local_start) * rb);
    } else {
      for (const Segment& s : p.segments) {
        OSLO_CHECK(s.global_start % be == 0 && s.length % be == 0 && s.local_start % be == 0,
                   OSLO_ERR_SHAPE, who, ": the slice [", s.global_start, ", ",
                   s.global_start + s.length, ") of its rows would split a block of ", be,
                   " elements of ", dtype_name(q),
                   "; use a tensor-parallel size that cuts rows at multiples of ", be);
        src.read_box(t, 1, s.global_start, s.length, st::Dtype::U8, seg);
        copy_rows({R, C / be}, 1, s.local_start / be, s.length / be, static_cast<size_t>(bb), host,
                  seg, false);
      }
    }
    backend.copy(dev, host, bytes, CopyKind::HostToDevice);
    return;
  }
  // The f32 values of the local slice, then quantized row by row.
  const quant::Format f = quant::format_of_dtype(q);
  OSLO_CHECK(quant::can_quantize(f), OSLO_ERR_NOT_SUPPORTED, who, ": oslo cannot quantize to ",
             dtype_name(q), "; load a file that holds the tensor in ", dtype_name(q));
  std::vector<PlacedTensor> one(1);
  one[0].placement = p;
  one[0].tensor = Tensor::zeros(pt.tensor.storage()->backend, OSLO_DTYPE_F32, ls);
  load_placed(src, one, backend);
  std::vector<float> vals(static_cast<size_t>(R * C));
  backend.copy(vals.data(), one[0].tensor.data(), vals.size() * sizeof(float),
               CopyKind::DeviceToHost);
  one.clear();
  if (stage.size() < bytes) stage.resize(bytes);
  staging = std::max<uint64_t>(staging, bytes);
  for (int64_t r = 0; r < R; ++r)
    quant::quantize_row(f, vals.data() + r * C, stage.data() + static_cast<size_t>(r) * rb,
                        static_cast<uint64_t>(C));
  backend.copy(dev, stage.data(), bytes, CopyKind::HostToDevice);
}

}  // namespace

void load_placed(WeightSource& src, std::vector<PlacedTensor>& tensors, Backend& backend,
                 ModelLoadStats* stats, const ProgressFn& progress) {
  const uint64_t b0 = src.bytes_read(), c0 = src.read_calls(), f0 = src.files_opened();
  std::unordered_set<std::string> names;
  std::vector<const SourceTensor*> srcs;
  uint64_t total = 0;
  for (const PlacedTensor& pt : tensors) {
    const Placement& p = pt.placement;
    const std::string who = "tensor " + quote(p.name);
    check_placement(p, who);
    OSLO_CHECK(names.insert(p.name).second, OSLO_ERR_INVALID_ARGUMENT, who, " is placed twice");
    const SourceTensor& t = src.at(p.name);
    OSLO_CHECK(t.shape == p.global_shape, OSLO_ERR_SHAPE, who, ": ", quote_path(src.path()),
               " has shape ", shape_str(t.shape), " but the model expects ",
               shape_str(p.global_shape));
    OSLO_CHECK(pt.tensor.defined(), OSLO_ERR_INVALID_ARGUMENT, who, ": no local tensor");
    OSLO_CHECK(pt.tensor.shape() == p.local_shape(), OSLO_ERR_SHAPE, who, ": the local tensor is ",
               shape_str(pt.tensor.shape()), " but the placement needs ",
               shape_str(p.local_shape()));
    oslo_dtype sdt;
    const bool to_block = dtype_is_block(pt.tensor.dtype());
    OSLO_CHECK(t.quantized()
                   ? (to_block || dtype_is_float(pt.tensor.dtype()))
                   : st::to_oslo(t.dtype, &sdt) &&
                         dtype_is_float(sdt) == (to_block || dtype_is_float(pt.tensor.dtype())),
               OSLO_ERR_DTYPE, who, ": cannot load ",
               t.quantized() ? dtype_name(t.quant) : st::dtype_name(t.dtype), " from ",
               quote_path(src.path()), " into a ", dtype_name(pt.tensor.dtype()), " tensor");
    if (p.split_dim < 0)
      src.check_tensor(t);
    else
      for (const Segment& s : p.segments)
        src.check_tensor(t, p.split_dim, s.global_start, s.length);
    srcs.push_back(&t);
    total += pt.tensor.nbytes();
  }

  std::vector<char> stage;
  uint64_t done = 0, staging = 0;
  if (progress) progress(0, total);
  for (size_t i = 0; i < tensors.size(); ++i) {
    PlacedTensor& pt = tensors[i];
    const Placement& p = pt.placement;
    const SourceTensor& t = *srcs[i];
    const oslo_dtype dt = pt.tensor.dtype();
    if (dtype_is_block(dt)) {
      load_block(src, t, pt, backend, stage, staging);
      done += pt.tensor.nbytes();
      if (progress) progress(done, total);
      continue;
    }
    const st::Dtype out = st::from_oslo(dt);
    const size_t es = dtype_size(dt);
    char* dev = static_cast<char*>(pt.tensor.data());
    const std::vector<int64_t> lshape = hf_local_shape(p);
    const int nd = static_cast<int>(lshape.size());
    if (pt.tensor.nbytes() == 0) continue;
    // Rows of the split dimension no segment covers: padding.
    bool contiguous = !p.transpose;
    for (int k = 0; k < p.split_dim; ++k) contiguous = contiguous && lshape[k] == 1;
    if (contiguous) {
      // Rows (along dim 0, or along split_dim with only unit dimensions
      // before it) are contiguous in the local tensor: stream in chunks.
      const int d = p.split_dim < 0 ? (nd > 0 ? 0 : -1) : p.split_dim;
      uint64_t row_elems = 1;
      for (int k = d + 1; k < nd; ++k) row_elems *= static_cast<uint64_t>(lshape[k]);
      const uint64_t row_bytes = std::max<uint64_t>(1, row_elems * es);
      const int64_t chunk = static_cast<int64_t>(std::max<uint64_t>(1, kStageBytes / row_bytes));
      struct Piece {
        int64_t gstart, lstart, len;
      };
      std::vector<Piece> pieces;
      if (p.split_dim < 0)
        pieces.push_back({0, 0, d < 0 ? 1 : lshape[0]});
      else
        for (const Segment& s : p.segments)
          pieces.push_back({s.global_start, s.local_start, s.length});
      for (const Piece& pc : pieces) {
        for (int64_t r = 0; r < pc.len; r += chunk) {
          const int64_t n = std::min(chunk, pc.len - r);
          const size_t bytes = static_cast<size_t>(n * row_bytes);
          if (stage.size() < bytes) stage.resize(bytes);
          staging = std::max<uint64_t>(staging, bytes);
          if (d < 0)
            src.read_box(t, -1, 0, 0, out, stage.data());  // a scalar
          else
            src.read_box(t, d, pc.gstart + r, n, out, stage.data());
          backend.copy(dev + static_cast<size_t>(pc.lstart + r) * row_bytes, stage.data(), bytes,
                       CopyKind::HostToDevice);
          done += bytes;
          if (progress) progress(done, total);
        }
      }
      if (p.split_dim >= 0) {
        std::vector<std::pair<int64_t, int64_t>> cov;
        for (const Segment& s : p.segments)
          cov.push_back({s.local_start, s.local_start + s.length});
        std::sort(cov.begin(), cov.end());
        int64_t at = 0;
        cov.push_back({p.local_extent, p.local_extent});
        for (const auto& c : cov) {
          if (c.first > at) {
            std::vector<int64_t> zs = lshape;
            zs[d] = c.first - at;
            backend.fill(make_view(dev + static_cast<size_t>(at) * row_bytes, dt, zs), 0.0);
            done += static_cast<uint64_t>(c.first - at) * row_bytes;
          }
          at = std::max(at, c.second);
        }
      }
    } else {
      // Assemble the local tensor (HF layout) on the host, then copy it (and
      // transpose it on the backend).
      const size_t bytes = static_cast<size_t>(numel_of(lshape) * es);
      size_t seg_max = 0;
      for (const Segment& s : p.segments) {
        std::vector<int64_t> ss = p.global_shape;
        ss[p.split_dim] = s.length;
        seg_max = std::max<size_t>(seg_max, static_cast<size_t>(numel_of(ss) * es));
      }
      // One segment filling the local tensor (no padding) is read in place.
      const bool whole =
          p.split_dim < 0 || (p.segments.size() == 1 && p.segments[0].local_start == 0 &&
                              p.segments[0].length == p.local_extent);
      if (whole) seg_max = 0;
      if (stage.size() < bytes + seg_max) stage.resize(bytes + seg_max);
      staging = std::max<uint64_t>(staging, bytes + seg_max);
      char* host = stage.data();
      char* seg = stage.data() + bytes;
      if (p.split_dim < 0) {
        src.read_box(t, -1, 0, 0, out, host);
      } else if (whole) {
        src.read_box(t, p.split_dim, p.segments[0].global_start, p.segments[0].length, out, host);
      } else {
        std::memset(host, 0, bytes);  // padding rows
        for (const Segment& s : p.segments) {
          src.read_box(t, p.split_dim, s.global_start, s.length, out, seg);
          copy_rows(lshape, p.split_dim, s.local_start, s.length, es, host, seg, false);
        }
      }
      if (!p.transpose) {
        backend.copy(dev, host, bytes, CopyKind::HostToDevice);
      } else {
        DeviceBuf tmp(backend, bytes);
        backend.copy(tmp.p, host, bytes, CopyKind::HostToDevice);
        backend.convert(make_view(dev, dt, pt.tensor.shape()),
                        transposed(make_view(tmp.p, dt, lshape)));
        backend.synchronize();
      }
      done += bytes;
      if (progress) progress(done, total);
    }
  }
  if (stats) {
    stats->bytes_read += src.bytes_read() - b0;
    stats->read_calls += src.read_calls() - c0;
    stats->files_opened += src.files_opened() - f0;
    stats->tensors += tensors.size();
    stats->staging_bytes = std::max(stats->staging_bytes, staging);
  }
}

void load_placed_collective(const std::string& path, std::vector<PlacedTensor>& tensors,
                            Backend& backend, Control& world, ModelLoadStats* stats,
                            const ProgressFn& progress) {
  LocalOutcome f("model load");
  f.run([&] {
    WeightSource src(path);
    load_placed(src, tensors, backend, stats, progress);
  });
  agree_on_outcome(world, f, "model load from " + quote_path(path));
}

void run_agreed(Control& world, const std::string& what, const std::function<void()>& body) {
  LocalOutcome f("model");
  f.run(body);
  agree_on_outcome(world, f, what);
}

}  // namespace oslo
