#include <gtest/gtest.h>
#include "common/varint.h"
TEST(PreloadCore, Links){ EXPECT_EQ(mlprof::varint::zigzag(-1), 1u); }
