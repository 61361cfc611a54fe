// A small native "model server" to profile: worker threads take request batches, parse their text
// input, run a 3-layer MLP (dense matrix products, ReLU, softmax) and format JSON replies.
// Where the time goes is known by construction: mostly in dense_layer (the matmul inner loop),
// some in parse_request and format_reply, little elsewhere.
//
// Usage: native_inference [requests=400] [workers=2]
#include <pthread.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kIn = 256, kHidden = 512, kOut = 16, kBatch = 32;

struct Model {
  std::vector<float> w1, w2, w3;  // row-major [out][in]
  explicit Model(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 0.05f);
    w1.resize(kHidden * kIn);
    w2.resize(kHidden * kHidden);
    w3.resize(kOut * kHidden);
    for (auto* w : {&w1, &w2, &w3})
      for (auto& x : *w) x = d(rng);
  }
};

// out[b][o] = relu?(sum_i in[b][i] * w[o][i])
__attribute__((noinline)) void dense_layer(const float* in, int n_in, const float* w, int n_out, float* out, bool relu) {
  for (int b = 0; b < kBatch; ++b) {
    for (int o = 0; o < n_out; ++o) {
      const float* row = w + static_cast<size_t>(o) * n_in;
      const float* x = in + static_cast<size_t>(b) * n_in;
      float acc = 0.f;
      for (int i = 0; i < n_in; ++i) acc += row[i] * x[i];  // the matmul inner loop
      out[b * n_out + o] = relu && acc < 0.f ? 0.f : acc;
    }
  }
}

__attribute__((noinline)) void softmax(float* v, int n) {
  for (int b = 0; b < kBatch; ++b) {
    float* r = v + b * n;
    float mx = r[0], sum = 0.f;
    for (int i = 1; i < n; ++i) mx = r[i] > mx ? r[i] : mx;
    for (int i = 0; i < n; ++i) sum += (r[i] = std::exp(r[i] - mx));
    for (int i = 0; i < n; ++i) r[i] /= sum;
  }
}

// A request is a line of comma-separated numbers, as a client would send it.
__attribute__((noinline)) std::string make_request(std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::string s;
  char buf[32];
  for (int i = 0; i < kBatch * kIn; ++i) {
    snprintf(buf, sizeof buf, "%.5f,", d(rng));
    s += buf;
  }
  return s;
}

__attribute__((noinline)) void parse_request(const std::string& text, float* out) {
  const char* p = text.c_str();
  for (int i = 0; i < kBatch * kIn; ++i) {
    char* end = nullptr;
    out[i] = strtof(p, &end);
    p = end + 1;
  }
}

__attribute__((noinline)) std::string format_reply(const float* probs) {
  std::string s = "{\"predictions\":[";
  char buf[64];
  for (int b = 0; b < kBatch; ++b) {
    int best = 0;
    for (int i = 1; i < kOut; ++i) best = probs[b * kOut + i] > probs[b * kOut + best] ? i : best;
    snprintf(buf, sizeof buf, "%s{\"class\":%d,\"p\":%.4f}", b ? "," : "", best, probs[b * kOut + best]);
    s += buf;
  }
  return s + "]}";
}

struct Worker {
  const Model* model;
  int requests;
  unsigned seed;
  double checksum = 0;
};

void* serve(void* arg) {
  auto* w = static_cast<Worker*>(arg);
  std::mt19937 rng(w->seed);
  std::vector<float> in(kBatch * kIn), h1(kBatch * kHidden), h2(kBatch * kHidden), out(kBatch * kOut);
  for (int r = 0; r < w->requests; ++r) {
    std::string req = make_request(rng);
    parse_request(req, in.data());
    dense_layer(in.data(), kIn, w->model->w1.data(), kHidden, h1.data(), true);
    dense_layer(h1.data(), kHidden, w->model->w2.data(), kHidden, h2.data(), true);
    dense_layer(h2.data(), kHidden, w->model->w3.data(), kOut, out.data(), false);
    softmax(out.data(), kOut);
    w->checksum += static_cast<double>(format_reply(out.data()).size());
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  int requests = argc > 1 ? atoi(argv[1]) : 400;
  int workers = argc > 2 ? atoi(argv[2]) : 2;
  if (requests <= 0 || workers <= 0 || workers > 64) {
    fprintf(stderr, "usage: native_inference [requests>0] [workers 1..64]\n");
    return 2;
  }
  Model model(42);
  std::vector<Worker> ws(static_cast<size_t>(workers));
  std::vector<pthread_t> threads(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    ws[i] = {&model, requests / workers, static_cast<unsigned>(i + 1)};
    char name[16];
    snprintf(name, sizeof name, "worker-%zu", i);
    pthread_create(&threads[i], nullptr, serve, &ws[i]);
    pthread_setname_np(threads[i], name);
  }
  double total = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    pthread_join(threads[i], nullptr);
    total += ws[i].checksum;
  }
  printf("served %d requests with %d workers (reply bytes %.0f)\n", requests / workers * workers, workers, total);
  return 0;
}
