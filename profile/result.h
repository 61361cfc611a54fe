// Errors as values for collector, profile and report code: a Result holds a value or a message
// that says what was wrong and what to do. Exceptions stay at the tool boundary.
#pragma once
#include <optional>
#include <string>
#include <utility>

namespace mlprof {

struct Error {
  std::string message;
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Error e) : error_(std::move(e.message)) {}
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  const std::string& error() const { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

// For operations with no value: empty message means success.
struct Status {
  std::string error;
  bool ok() const { return error.empty(); }
  static Status Ok() { return {}; }
};

}  // namespace mlprof
