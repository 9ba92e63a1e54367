// Pre-emption signal flag: SIGTERM/SIGUSR1 set it, a second signal keeps it, reset clears it.
#include <gtest/gtest.h>

#include <csignal>

#include "core/signals.h"

TEST(Signals, SigtermSetsTheFlagAndProcessSurvives) {
  ht::signals::install();
  ht::signals::reset_for_tests();
  EXPECT_FALSE(ht::signals::pending());
  EXPECT_EQ(ht::signals::last_signal(), 0);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_TRUE(ht::signals::pending());
  EXPECT_EQ(ht::signals::last_signal(), SIGTERM);
  EXPECT_STREQ(ht::signals::last_signal_name(), "SIGTERM");
}

TEST(Signals, SecondSignalKeepsTheFlagAndRecordsTheLatest) {
  ht::signals::install();
  ht::signals::reset_for_tests();
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_TRUE(ht::signals::pending());
  EXPECT_EQ(ht::signals::last_signal(), SIGTERM);
  ht::signals::reset_for_tests();
  EXPECT_FALSE(ht::signals::pending());
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_STREQ(ht::signals::last_signal_name(), "SIGUSR1");
  ht::signals::install();  // idempotent
  EXPECT_TRUE(ht::signals::pending());
}
