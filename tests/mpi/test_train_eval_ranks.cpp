// Evaluation metrics do not depend on the number of ranks: the world's sharded evaluation equals
// a single-process evaluation of the whole validation split (counts exactly, loss to rounding).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "comm/communicator.h"
#include "core/fs.h"
#include "data/prepare.h"
#include "model/gpt.h"
#include "train/evaluate.h"

namespace {

// Rank 0 prepares the files; everyone waits at the barrier. Paths agree through a broadcast.
std::string shared_dir(ht::comm::Communicator& comm) {
  std::string dir;
  if (comm.rank() == 0) {
    char tmpl[] = "/tmp/ht-eval-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  return comm.broadcast_string(dir, 0);
}

std::string write_docs(const std::string& dir, const std::string& name, int first, int count) {
  const std::string path = dir + "/" + name;
  ht::fs::make_dirs(path);
  for (int i = first; i < first + count; ++i)
    std::ofstream(path + "/doc" + std::to_string(i) + ".txt")
        << "Document " << i << " says: the quick brown fox " << i * 7 % 13 << " jumps over the lazy dog.\n";
  return path;
}

ht::model::GptOptions tiny(int64_t vocab, int64_t labels, int64_t seq) {
  ht::model::GptOptions o;
  o.vocab_size = vocab;
  o.n_layer = 2;
  o.n_head = 2;
  o.d_model = 32;
  o.max_seq_len = seq;
  o.num_labels = labels;
  return o;
}

// Evaluates gpt on the val split sharded over the world and whole in one process; returns the world result.
ht::train::EvalResult expect_world_equals_single(ht::model::Gpt& gpt, const std::string& path, int64_t seq_len,
                                                 int64_t batch, ht::comm::Communicator& world);

void expect_same(const ht::train::EvalResult& world, const ht::train::EvalResult& single) {
  EXPECT_EQ(world.count, single.count);
  EXPECT_DOUBLE_EQ(world.accuracy, single.accuracy);
  EXPECT_DOUBLE_EQ(world.f1, single.f1);
  EXPECT_NEAR(world.loss, single.loss, 1e-6 * std::abs(single.loss));
}

ht::train::EvalResult expect_world_equals_single(ht::model::Gpt& gpt, const std::string& path, int64_t seq_len,
                                                 int64_t batch, ht::comm::Communicator& world) {
  ht::data::EvalReader sharded(ht::data::Dataset::open(path), "val", seq_len, batch, world);
  const auto w = ht::train::evaluate(gpt, sharded, world, torch::kCPU);
  auto local = ht::comm::make_local();
  ht::data::EvalReader whole(ht::data::Dataset::open(path), "val", seq_len, batch, *local);
  const auto s = ht::train::evaluate(gpt, whole, *local, torch::kCPU);
  EXPECT_GT(s.count, 0);
  expect_same(w, s);
  return w;
}

}  // namespace

TEST(EvalRanks, LanguageModelMetricsEqualSingleProcess) {
  auto world = ht::comm::make_mpi_world();
  const auto dir = shared_dir(*world);
  if (world->rank() == 0) {
    ht::data::PrepareOptions po;
    po.inputs = {"/usr/share/games/fortunes/fortunes"};
    po.output = dir + "/lm.h5";
    po.val_fraction = 0.2;
    po.progress = false;
    ht::data::prepare(po);
  }
  world->barrier();
  torch::manual_seed(5);
  ht::model::Gpt gpt(tiny(258, 0, 32));
  const auto w = expect_world_equals_single(gpt, dir + "/lm.h5", 32, 4, *world);
  EXPECT_NEAR(w.perplexity, std::exp(w.loss), 1e-9 * w.perplexity);
  world->barrier();
  if (world->rank() == 0) ht::fs::remove_tree(dir);
}

TEST(EvalRanks, ClassificationMetricsEqualSingleProcess) {
  auto world = ht::comm::make_mpi_world();
  const auto dir = shared_dir(*world);
  if (world->rank() == 0) {
    ht::data::PrepareOptions po;
    po.inputs = {"a=" + write_docs(dir, "a", 0, 30), "b=" + write_docs(dir, "b", 100, 30),
                 "c=" + write_docs(dir, "c", 200, 30)};
    po.output = dir + "/cls.h5";
    po.labels_from_dirs = true;
    po.seq_len = 48;
    po.val_fraction = 0.3;
    po.progress = false;
    ht::data::prepare(po);
  }
  world->barrier();
  torch::manual_seed(6);
  ht::model::Gpt gpt(tiny(258, 3, 48));
  expect_world_equals_single(gpt, dir + "/cls.h5", 48, 5, *world);
  world->barrier();
  if (world->rank() == 0) ht::fs::remove_tree(dir);
}
