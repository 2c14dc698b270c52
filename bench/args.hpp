// Command line of flashcore-bench (BENCH.md's contract plus --tile, --list, --suite, --seed).
#pragma once

#include <string>

#include "bench.hpp"

namespace fcbench {

struct Options {
  Config cfg;              // the single configuration (ignored with --suite)
  std::string suite;       // empty: run cfg; no arguments at all: "default"
  bool json = false;
  bool list = false;
  bool peaks = false;      // --peaks: print every ceiling this CPU has a probe for
  bool help = false;
  bool seed_given = false;
  uint64_t seed = 0;
};

// Returns false with a message in `err` on a bad command line.
bool parse_args(int argc, char** argv, Options& opt, std::string& err);
void print_usage(const char* argv0);

}  // namespace fcbench
