// Status and Result<T>: the error type every kvtier module returns across its
// boundary. No exceptions cross a module; a failed call says what went wrong
// with a code the caller can branch on and a message a person can read.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // the caller passed something the API does not accept
  kNotFound,         // the thing asked for does not exist
  kAlreadyExists,    // create of something that exists
  kOutOfSpace,       // no tier could take the write
  kRejected,         // admission policy said no
  kCorruption,       // checksum, magic or header mismatch
  kIoError,          // the device reported an error
  kTimeout,          // an operation did not complete in its time budget
  kUnavailable,      // a component is shut down or not reachable
  kFailedPrecondition,
  kInternal,
  kPermissionDenied,  // the caller is not allowed to do this (credentials, policy)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  static Status invalid_argument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status already_exists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status out_of_space(std::string m) { return {StatusCode::kOutOfSpace, std::move(m)}; }
  static Status rejected(std::string m) { return {StatusCode::kRejected, std::move(m)}; }
  static Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status failed_precondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status permission_denied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "IoError: pread failed at offset 4096" or "OK".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

#define KVTIER_RETURN_IF_ERROR(expr) \
  do {                               \
    ::kvtier::Status _st = (expr);   \
    if (!_st.ok()) return _st;       \
  } while (0)

// `KVTIER_ASSIGN_OR_RETURN(auto v, f());` declares v from f()'s value, or
// returns f()'s status from the enclosing function (which returns a Status or
// any Result).
#define KVTIER_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_result_, __LINE__), lhs, rexpr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)
#define KVTIER_CONCAT_INNER_(a, b) a##b

}  // namespace kvtier
