// A hand-written training loop from hpctrain's building blocks: the C++ twin of the
// Hugging Face Accelerate loop with `accumulate(model)`, `backward(loss)`, `optimizer.step()`,
// `lr_scheduler.step()`, `zero_grad()` and `with LocalSGD(model, local_sgd_steps=N):`. The
// data-parallel strategy comes from the config (make_data_parallel); the loop never asks which.
//
//   mpirun -np 2 build/bin/custom_loop --data data/fortunes.h5 --steps 30
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>

#include "comm/communicator.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/accelerator.h"
#include "train/data_parallel/data_parallel.h"
#include "train/optimizer/schedule.h"

int main(int argc, char** argv) {
  ht::comm::MpiSession mpi(&argc, &argv);
  auto comm = ht::comm::make_mpi_world();
  ht::log::init(comm->rank(), comm->size());
  CLI::App app{"custom_loop: hand-written loop with Accelerator + LocalSgd scopes"};
  std::string data_path;
  int64_t steps = 30, accum = 2, local_steps = 4;
  app.add_option("--data", data_path, "causal-lm dataset file")->required();
  app.add_option("--steps", steps, "optimizer steps");
  app.add_option("--accum", accum, "gradient accumulation steps");
  app.add_option("--local-sgd-steps", local_steps, "local steps between parameter averages");
  CLI11_PARSE(app, argc, argv);

  try {
    ht::config::Config cfg;  // defaults, then the few knobs of this example
    cfg.train.lr = 1e-3;
    cfg.train.warmup_steps = 5;
    cfg.local_sgd.enabled = true;
    cfg.local_sgd.steps = local_steps;
    cfg.data.paths = {data_path};
    const auto data = ht::data::open(cfg.data, "--data");
    cfg.model.vocab_size = data->meta().vocab_size;
    cfg.model.n_layer = 2;
    cfg.model.d_model = 64;
    cfg.model.seq_len = 64;
    cfg.train.micro_batch_size = 8;
    cfg.train.grad_accum_steps = accum;
    cfg.data.prefetch_batches = 2;
    torch::set_num_threads(1);
    torch::manual_seed(0);
    // What the Trainer does for train.retain_freed_memory: no page faults for each step's activations.
    if (cfg.train.retain_freed_memory) ht::memory::retain_freed_memory();

    ht::model::Gpt model(ht::model::GptOptions::from_config(cfg.model));
    ht::train::LrSchedule lr_scheduler(cfg.train, steps);
    ht::train::Accelerator accelerator(accum);
    ht::data::Loader loader(data, ht::data::LoaderOptions::from_config(cfg), *comm);

    double first = 0, last = 0;
    {
      auto dp = ht::train::make_data_parallel(*model, *comm, cfg);  // `with LocalSGD(...)`
      auto& optimizer = dp->optimizer();
      int64_t step = 0;
      double loss_sum = 0;
      while (step < steps) {
        auto batch = loader.next();
        auto scope = accelerator.accumulate();
        auto loss = ht::model::lm_loss(model->lm_logits(batch.input), batch.target);
        dp->before_backward(accelerator.sync_gradients());  // buckets may start during this backward
        accelerator.backward(loss);
        loss_sum += loss.item<double>() / static_cast<double>(accum);
        if (!accelerator.sync_gradients()) continue;
        dp->after_backward();
        lr_scheduler.apply(optimizer, step);  // lr_scheduler.step()
        dp->clip_and_update(1.0);             // clip + optimizer.step()
        dp->zero_grad();                      // in place: gradients may live in an exchange buffer
        dp->after_update();                   // averages parameters every N steps
        if (step == 0) first = loss_sum;
        last = loss_sum;
        if (step % 10 == 0) HT_INFO("step {} loss {:.4f}", step, loss_sum);
        loss_sum = 0;
        ++step;
      }
      HT_INFO("parameter averages: {}", dp->stats().syncs);
    }  // the strategy's destructor ran the final synchronisation
    HT_INFO("first loss {:.4f}, last loss {:.4f}", first, last);
    if (!(std::isfinite(last) && last < first)) {
      HT_ERROR("loss did not decrease");
      return 3;
    }
    return 0;
  } catch (const ht::Error& e) {
    HT_ERROR("{}", e.what());
    if (comm->size() > 1) comm->abort(static_cast<int>(e.code()));
    return static_cast<int>(e.code());
  }
}
