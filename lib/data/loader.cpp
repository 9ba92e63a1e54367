// Loader: deterministic distributed sampling + a bounded prefetch queue on a background thread.
// EvalReader: contiguous per-rank shards (of the split, or of its seeded subset), read in order on
// the calling thread.
#include "data/loader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/sample_source.h"
#include "data/sampler.h"

namespace ht::data {
namespace {

struct Cursor {
  int64_t epoch = 0;
  int64_t micro = 0;  // micro-step index within the epoch (steps_per_epoch * grad_accum of them)
};

struct Item {
  Batch batch;
  std::exception_ptr error;
};

// Errors from the prefetch thread reach the caller as ht::Error naming the file.
[[noreturn]] void rethrow_as_data_error(const std::exception_ptr& e, const std::string& path) {
  try {
    std::rethrow_exception(e);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    HT_FAIL(ExitCode::kData, "{}: data loader failed: {}", path, ex.what());
  }
}

}  // namespace

struct Loader::Impl {
  LoaderOptions opts;
  std::string path;  // for messages
  std::unique_ptr<SampleSource> source;
  BatchGeometry geo;
  int64_t rank = 0, samples = 0, steps = 0;
  int64_t seed = 0;
  Cursor next;  // the batch next() returns next

  // Producer-side state (touched by the worker only while it runs).
  int64_t perm_epoch = -1;
  std::vector<int64_t> perm;

  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  bool stop = false;
  std::exception_ptr failure;

  Cursor advance(Cursor c) const {
    if (++c.micro == steps * geo.grad_accum) c = Cursor{c.epoch + 1, 0};
    return c;
  }

  Batch make(const Cursor& c) {
    if (perm_epoch != c.epoch) {
      perm = epoch_permutation(samples, seed, c.epoch, opts.shuffle);
      perm_epoch = c.epoch;
    }
    const int64_t step = c.micro / geo.grad_accum, m = c.micro % geo.grad_accum;
    return source->read(micro_batch_indices(perm, geo, step, m, rank));
  }

  void produce(Cursor c) {
    const size_t capacity = static_cast<size_t>(opts.prefetch);
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || queue.size() < capacity; });
        if (stop) return;
      }
      Item item;
      try {
        item.batch = make(c);
      } catch (...) {
        item.error = std::current_exception();
      }
      const bool failed = static_cast<bool>(item.error);
      {
        std::lock_guard<std::mutex> lk(mu);
        queue.push_back(std::move(item));
      }
      cv.notify_all();
      if (failed) return;
      c = advance(c);
    }
  }

  void start() {
    perm_epoch = -1;
    if (opts.prefetch > 0) worker = std::thread([this, c = next] { produce(c); });
  }

  void halt() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
    queue.clear();
    stop = false;
  }

  Batch take() {
    if (failure) rethrow_as_data_error(failure, path);
    Item item;
    if (opts.prefetch <= 0) {
      try {
        item.batch = make(next);
      } catch (...) {
        item.error = std::current_exception();
      }
    } else {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return !queue.empty(); });
      item = std::move(queue.front());
      queue.pop_front();
      lk.unlock();
      cv.notify_all();
    }
    if (item.error) {
      failure = item.error;
      rethrow_as_data_error(failure, path);
    }
    next = advance(next);
    return std::move(item.batch);
  }
};

LoaderOptions LoaderOptions::from_config(const config::Config& cfg) {
  LoaderOptions o;
  o.split = "train";
  o.seq_len = cfg.model.seq_len;
  o.micro_batch = cfg.train.micro_batch_size;
  o.grad_accum = cfg.train.grad_accum_steps;
  o.shuffle = cfg.data.shuffle;
  o.seed = cfg.data.seed;
  o.prefetch = cfg.data.prefetch_batches;
  o.model_vocab_size = cfg.model.vocab_size;
  return o;
}

Loader::Loader(std::shared_ptr<const Dataset> data, const LoaderOptions& opts, comm::Communicator& comm)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.opts = opts;
  HT_REQUIRE(opts.micro_batch > 0 && opts.grad_accum > 0, ExitCode::kUsage,
             "micro_batch ({}) and grad_accum ({}) must be positive", opts.micro_batch, opts.grad_accum);
  s.path = data->path();
  check_vocab(data->meta(), opts.model_vocab_size);
  s.source = std::make_unique<SampleSource>(std::move(data), opts.split, opts.seq_len, opts.cache_bytes);
  s.geo = BatchGeometry{comm.size(), opts.grad_accum, opts.micro_batch};
  s.rank = comm.rank();
  s.samples = s.source->size();
  s.steps = s.geo.steps_per_epoch(s.samples);
  s.seed = opts.seed;
  const std::string where = fmt::format("{}: split '{}' ({} samples of seq_len {})", s.path, opts.split,
                                        s.samples, s.source->seq_len());
  HT_REQUIRE(s.samples >= comm.size(), ExitCode::kData,
             "{}: fewer samples than the {} ranks; run on fewer ranks or prepare more data", where, comm.size());
  HT_REQUIRE(s.steps > 0, ExitCode::kData,
             "{}: fewer samples than one global batch of {} (= {} ranks x {} grad_accum x {} micro_batch); lower "
             "train.micro_batch_size or train.grad_accum_steps, use fewer ranks, or prepare more data",
             where, s.geo.global_batch(), comm.size(), opts.grad_accum, opts.micro_batch);
  s.start();
}

Loader::~Loader() { impl_->halt(); }

Batch Loader::next() { return impl_->take(); }

LoaderState Loader::state() const {
  const Impl& s = *impl_;
  return LoaderState{s.seed, s.next.epoch, s.next.micro * s.geo.world * s.geo.micro_batch};
}

void Loader::restore(const LoaderState& st) {
  Impl& s = *impl_;
  const int64_t per_micro = s.geo.world * s.geo.micro_batch;
  const int64_t epoch_samples = s.steps * s.geo.global_batch();
  HT_REQUIRE(st.epoch >= 0 && st.samples_consumed >= 0 && st.samples_consumed % per_micro == 0 &&
                 st.samples_consumed <= epoch_samples,
             ExitCode::kData,
             "{}: loader state (epoch {}, samples_consumed {}) does not fit this run: need a multiple of ranks x "
             "micro_batch = {} and at most {} per epoch (was the global batch size changed?)",
             s.path, st.epoch, st.samples_consumed, per_micro, epoch_samples);
  s.halt();
  s.failure = nullptr;
  s.seed = st.seed;
  s.next = Cursor{st.epoch, st.samples_consumed / per_micro};
  if (s.next.micro == s.steps * s.geo.grad_accum) s.next = Cursor{st.epoch + 1, 0};
  s.start();
}

int64_t Loader::epoch() const { return impl_->next.epoch; }
int64_t Loader::samples_per_epoch() const { return impl_->samples; }
int64_t Loader::steps_per_epoch() const { return impl_->steps; }
const DatasetMeta& Loader::meta() const { return impl_->source->meta(); }

struct EvalReader::Impl {
  std::unique_ptr<SampleSource> source;
  int64_t begin = 0, end = 0, pos = 0, batch = 0;
  std::vector<int64_t> subset;  // global sample indices when limited; positions index into it
};

EvalReader::EvalReader(std::shared_ptr<const Dataset> data, const std::string& split, int64_t seq_len, int64_t batch,
                       comm::Communicator& comm, int64_t max_samples, int64_t seed)
    : impl_(std::make_unique<Impl>()) {
  HT_REQUIRE(batch > 0, ExitCode::kUsage, "evaluation batch size {} must be positive", batch);
  impl_->source = std::make_unique<SampleSource>(std::move(data), split, seq_len, size_t{64} << 20);
  if (max_samples > 0 && max_samples < impl_->source->size())
    impl_->subset = eval_subset(impl_->source->size(), max_samples, seed);
  const int64_t n = impl_->subset.empty() ? impl_->source->size() : static_cast<int64_t>(impl_->subset.size());
  const int64_t w = comm.size(), r = comm.rank();
  impl_->begin = r * n / w;
  impl_->end = (r + 1) * n / w;
  impl_->pos = impl_->begin;
  impl_->batch = batch;
}

EvalReader::~EvalReader() = default;

bool EvalReader::next(Batch& out) {
  Impl& s = *impl_;
  if (s.pos >= s.end) return false;
  const int64_t count = std::min(s.batch, s.end - s.pos);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    ids[static_cast<size_t>(i)] = s.subset.empty() ? s.pos + i : s.subset[static_cast<size_t>(s.pos + i)];
  out = s.source->read(ids);
  s.pos += count;
  return true;
}

void EvalReader::rewind() { impl_->pos = impl_->begin; }

}  // namespace ht::data
