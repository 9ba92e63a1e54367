#include "train/evaluate.h"

#include <cmath>

#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "core/error.h"

namespace ht::train {

double macro_f1(const std::vector<int64_t>& confusion, int64_t num_labels) {
  double sum = 0.0;
  int64_t present = 0;
  for (int64_t c = 0; c < num_labels; ++c) {
    int64_t tp = confusion[static_cast<size_t>(c * num_labels + c)], fp = 0, fn = 0;
    for (int64_t o = 0; o < num_labels; ++o) {
      if (o == c) continue;
      fp += confusion[static_cast<size_t>(o * num_labels + c)];
      fn += confusion[static_cast<size_t>(c * num_labels + o)];
    }
    if (tp + fp + fn == 0) continue;  // label never seen nor predicted
    ++present;
    sum += 2.0 * static_cast<double>(tp) / static_cast<double>(2 * tp + fp + fn);
  }
  return present == 0 ? 0.0 : sum / static_cast<double>(present);
}

namespace {

void add_samples(const torch::Tensor& per_sample, EvalSums& sums) {
  sums.sample_sum += per_sample.sum().item<double>();
  sums.sample_sq += per_sample.square().sum().item<double>();
  sums.samples += per_sample.numel();
}

void accumulate_batch(model::Gpt& gpt, const data::Batch& batch, const torch::Device& device, EvalSums& sums) {
  auto input = batch.input.to(device);
  auto target = batch.target.to(device);
  const int64_t num_labels = gpt->options().num_labels;
  if (num_labels > 0) {
    auto logits = gpt->class_logits(input, batch.mask.to(device)).to(torch::kFloat);
    auto loss = torch::nn::functional::cross_entropy(
        logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    auto per_sample = torch::nn::functional::cross_entropy(
        logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone)).to(torch::kDouble);
    add_samples(per_sample, sums);
    auto pred = logits.argmax(-1);
    sums.loss_sum += loss.item<double>();
    sums.correct += pred.eq(target).sum().item<int64_t>();
    sums.count += target.size(0);
    auto t_cpu = target.cpu(), p_cpu = pred.cpu();
    auto t = t_cpu.accessor<int64_t, 1>();
    auto p = p_cpu.accessor<int64_t, 1>();
    for (int64_t i = 0; i < t.size(0); ++i) ++sums.confusion[static_cast<size_t>(t[i] * num_labels + p[i])];
  } else {
    auto logits = gpt->lm_logits(input).to(torch::kFloat);
    auto flat = logits.reshape({-1, logits.size(-1)});
    auto tflat = target.reshape({-1});
    auto loss = torch::nn::functional::cross_entropy(
        flat, tflat, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    auto per_token = torch::nn::functional::cross_entropy(
        flat, tflat, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    add_samples(per_token.view({target.size(0), -1}).to(torch::kDouble).mean(1), sums);
    sums.loss_sum += loss.item<double>();
    sums.correct += flat.argmax(-1).eq(tflat).sum().item<int64_t>();
    sums.count += tflat.size(0);
  }
}

}  // namespace

EvalResult evaluate(model::Gpt& gpt, data::EvalReader& reader, comm::Communicator& comm, const torch::Device& device) {
  const bool was_training = gpt->is_training();
  gpt->eval();
  torch::NoGradGuard no_grad;
  const int64_t num_labels = gpt->options().num_labels;
  EvalSums sums;
  sums.confusion.assign(static_cast<size_t>(std::max<int64_t>(num_labels, 0) * std::max<int64_t>(num_labels, 0)), 0);
  reader.rewind();
  data::Batch batch;
  while (reader.next(batch)) accumulate_batch(gpt, batch, device, sums);
  if (was_training) gpt->train();

  // One reduction of [loss_sum, correct, count, confusion...] as doubles (exact for counts < 2^53).
  std::vector<double> buf = {sums.loss_sum, static_cast<double>(sums.correct), static_cast<double>(sums.count)};
  for (auto c : sums.confusion) buf.push_back(static_cast<double>(c));
  buf.insert(buf.end(), {sums.sample_sum, sums.sample_sq, static_cast<double>(sums.samples)});
  comm.allreduce(buf.data(), buf.size(), comm::DType::kF64, comm::ReduceOp::kSum);
  const double n = buf[buf.size() - 1], mean = buf[buf.size() - 3] / std::max(1.0, n);

  EvalResult r;
  r.task = num_labels > 0 ? config::Task::kClassification : config::Task::kCausalLm;
  r.count = static_cast<int64_t>(buf[2]);
  if (r.count == 0) return r;
  r.loss = buf[0] / buf[2];
  r.accuracy = buf[1] / buf[2];
  r.samples = static_cast<int64_t>(n);
  if (n > 1) r.loss_stderr = std::sqrt(std::max(0.0, (buf[buf.size() - 2] - n * mean * mean) / (n - 1)) / n);
  if (num_labels > 0) {
    std::vector<int64_t> confusion(sums.confusion.size());
    for (size_t i = 0; i < confusion.size(); ++i) confusion[i] = static_cast<int64_t>(buf[3 + i]);
    r.f1 = macro_f1(confusion, num_labels);
    for (int64_t t = 0; t < num_labels; ++t) {
      int64_t row = 0;
      for (int64_t p = 0; p < num_labels; ++p) row += confusion[static_cast<size_t>(t * num_labels + p)];
      r.labels_present += row > 0 ? 1 : 0;
    }
  } else {
    r.perplexity = std::exp(r.loss);
  }
  return r;
}

EvalResult evaluate_checkpoint(const RunSetup& setup, const std::string& checkpoint_path, comm::Communicator& comm) {
  const config::Config& cfg = setup.cfg;
  const torch::Device device = select_device(cfg.train, comm);
  model::Gpt gpt(model::GptOptions::from_config(cfg.model));
  checkpoint::Manager manager(cfg.checkpoint_dir(), cfg.checkpoint.keep, comm);
  const checkpoint::Snapshot snap = manager.load(checkpoint_path);
  std::unique_ptr<data::EvalReader> reader;
  comm::run_agreed(comm, [&] {  // the same snapshot and model on every rank: one message per job
    checkpoint::check_compatible(snap, checkpoint::expectation_of(*gpt));
    checkpoint::load_model(snap, *gpt);
    reader = make_eval_reader(cfg, setup.data, comm);
  });
  gpt->to(device);
  return evaluate(gpt, *reader, comm, device);
}

std::unique_ptr<data::EvalReader> make_eval_reader(const config::Config& cfg, std::shared_ptr<const data::Dataset> data,
                                                   comm::Communicator& comm) {
  return std::make_unique<data::EvalReader>(std::move(data), "val", cfg.model.seq_len, cfg.eval.batch_size, comm,
                                            cfg.eval.max_batches * cfg.eval.batch_size, cfg.data.seed);
}

bool evaluation_due(const config::EvalConfig& eval, int64_t step, int64_t steps_per_epoch) {
  switch (eval.strategy) {
    case config::EvalStrategy::kSteps: return step % eval.every_steps == 0;
    case config::EvalStrategy::kEpoch: return steps_per_epoch > 0 && step % steps_per_epoch == 0;
    case config::EvalStrategy::kNo: return false;
  }
  return false;
}

}  // namespace ht::train
