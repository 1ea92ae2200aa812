// Operating errors for zerosim: a Status carries a canonical code and a message that
// names what went wrong (the file, key, rank or offset). Results that can fail return
// Status or Result<T>; both are [[nodiscard]] so that an ignored error is a compile
// warning. Programmer errors (a broken invariant inside the engine) are assertions
// (ZEROSIM_CHECK), not Statuses: they mean a bug in zerosim, not bad input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace zerosim {

// Canonical codes, after Abseil's: a caller switches on the code, a person reads the message.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input: config key, CLI flag, file content
  kNotFound,            // a file, key or tag that does not exist
  kAlreadyExists,
  kFailedPrecondition,  // the system is not in a state where the call can work
  kOutOfRange,
  kResourceExhausted,   // disk full, memory budget, buffer pool too small
  kDataLoss,            // checksum mismatch, torn or truncated data
  kUnimplemented,
  kIoError,             // a system call failed (EIO, ...)
  kAborted,             // a collective or a run was aborted
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: zero_optimization.stage: ..." for logs and CLI errors.
  std::string to_string() const;

  // Marks a Status as deliberately dropped (a best-effort cleanup, for example).
  void ignore_error() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
inline Status not_found(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
inline Status failed_precondition(std::string message) { return {StatusCode::kFailedPrecondition, std::move(message)}; }
inline Status out_of_range(std::string message) { return {StatusCode::kOutOfRange, std::move(message)}; }
inline Status resource_exhausted(std::string message) { return {StatusCode::kResourceExhausted, std::move(message)}; }
inline Status data_loss(std::string message) { return {StatusCode::kDataLoss, std::move(message)}; }
inline Status io_error(std::string message) { return {StatusCode::kIoError, std::move(message)}; }
inline Status aborted(std::string message) { return {StatusCode::kAborted, std::move(message)}; }
inline Status internal_error(std::string message) { return {StatusCode::kInternal, std::move(message)}; }
inline Status unimplemented(std::string message) { return {StatusCode::kUnimplemented, std::move(message)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : storage_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Status status) : storage_(std::move(status)) {  // NOLINT
    if (std::get<Status>(storage_).ok()) {
      std::fprintf(stderr, "zerosim: Result constructed from an OK Status without a value\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(storage_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(storage_);
  }
  T& value() & { return std::get<T>(storage_); }
  const T& value() const& { return std::get<T>(storage_); }
  T&& value() && { return std::get<T>(std::move(storage_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> storage_;
};

[[noreturn]] void check_failed(const char* condition, const char* file, int line, const char* message);

}  // namespace zerosim

// Programmer errors: always on (also in release builds), because a silently broken
// invariant in a training-state engine means silently wrong data.
#define ZEROSIM_CHECK(condition, message)                                         \
  do {                                                                            \
    if (!(condition)) ::zerosim::check_failed(#condition, __FILE__, __LINE__, message); \
  } while (false)

// Propagates a failed Status to the caller.
#define ZEROSIM_RETURN_IF_ERROR(expression)            \
  do {                                                 \
    ::zerosim::Status zerosim_status_ = (expression);  \
    if (!zerosim_status_.ok()) return zerosim_status_; \
  } while (false)

#define ZEROSIM_CONCAT_INNER(a, b) a##b
#define ZEROSIM_CONCAT(a, b) ZEROSIM_CONCAT_INNER(a, b)
// auto x = ...; from a Result<T>, returning its Status on failure.
#define ZEROSIM_ASSIGN_OR_RETURN(declaration, expression)                        \
  auto ZEROSIM_CONCAT(zerosim_result_, __LINE__) = (expression);                 \
  if (!ZEROSIM_CONCAT(zerosim_result_, __LINE__).ok())                           \
    return ZEROSIM_CONCAT(zerosim_result_, __LINE__).status();                   \
  declaration = std::move(ZEROSIM_CONCAT(zerosim_result_, __LINE__)).value()
