// ht::median: the middle of odd and even samples, whatever their order.
#include <gtest/gtest.h>

#include "core/median.h"

TEST(CoreMedian, OddCountTakesTheMiddleValueOfTheSortedSample) {
  EXPECT_DOUBLE_EQ(ht::median({0.9, 0.1, 0.5}), 0.5);
  EXPECT_DOUBLE_EQ(ht::median({0.7}), 0.7);
}

TEST(CoreMedian, EvenCountAveragesTheTwoMiddleValues) {
  // Sorted: 0.2 0.4 0.6 10.0; one outlier does not move it far.
  EXPECT_DOUBLE_EQ(ht::median({10.0, 0.4, 0.2, 0.6}), 0.5);
}

TEST(CoreMedian, EmptySampleIsZero) { EXPECT_DOUBLE_EQ(ht::median({}), 0.0); }
