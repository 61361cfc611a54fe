#include <gtest/gtest.h>
#include "common/varint.h"
TEST(Varint, RoundTrip){ uint8_t b[10]; for (uint64_t v : {0ull,1ull,127ull,128ull,300ull,~0ull}) { size_t n=mlprof::varint::encode(v,b); uint64_t o=0; ASSERT_EQ(mlprof::varint::decode(b,b+n,&o), n); EXPECT_EQ(o,v);} }
