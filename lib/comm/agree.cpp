#include "comm/agree.h"

#include <fmt/format.h>

namespace ht::comm {

std::string Disagreement::list(bool with_values) const {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!out.empty()) out += ", ";
    out += with_values ? fmt::format("rank {} ({:016x})", ranks[i], their_values[i]) : std::to_string(ranks[i]);
  }
  return out;
}

namespace {

Disagreement disagreement_of(const std::vector<uint64_t>& all) {
  Disagreement d;
  d.root_value = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    d.ranks.push_back(static_cast<int>(r));
    d.their_values.push_back(all[r]);
  }
  return d;
}

void require_no_disagreement(const Disagreement& d, ExitCode code, const std::string& what) {
  HT_REQUIRE(d.ranks.empty(), code, "{}: rank 0 has {:016x}, differing: {}", what, d.root_value, d.list(true));
}

}  // namespace

Disagreement compare_with_root(Communicator& comm, uint64_t value) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&value, all.data(), sizeof(value));
  return disagreement_of(all);
}

void run_agreed(Communicator& comm, const std::function<void()>& fn, ExitCode other_code) {
  int64_t code = 0;
  std::string message;
  try {
    fn();
  } catch (const Error& e) {
    code = static_cast<int64_t>(e.code());
    message = e.what();
  } catch (const std::exception& e) {
    code = static_cast<int64_t>(other_code);
    message = e.what();
  }
  std::vector<int64_t> codes(static_cast<size_t>(comm.size()));
  comm.allgather(&code, codes.data(), sizeof(code));
  for (int r = 0; r < comm.size(); ++r) {
    if (codes[static_cast<size_t>(r)] == 0) continue;
    const std::string text = comm.broadcast_string(message, r);
    throw AgreedError(static_cast<ExitCode>(codes[static_cast<size_t>(r)]), text);
  }
}

void require_agreement(Communicator& comm, uint64_t value, ExitCode code, const std::string& what) {
  require_no_disagreement(compare_with_root(comm, value), code, what);
}

double require_agreement_summing(Communicator& comm, uint64_t value, double addend, ExitCode code,
                                 const std::string& what) {
  struct Entry {
    uint64_t value;
    double addend;
  };
  const Entry mine{value, addend};
  std::vector<Entry> all(static_cast<size_t>(comm.size()));
  comm.allgather(&mine, all.data(), sizeof(Entry));
  std::vector<uint64_t> values;
  double sum = 0.0;
  for (const auto& e : all) values.push_back(e.value), sum += e.addend;
  require_no_disagreement(disagreement_of(values), code, what);
  return sum;
}

}  // namespace ht::comm
