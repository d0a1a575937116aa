#include "common/status.h"

#include "common/enum_name.h"

namespace kvtier {

std::string_view status_code_name(StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "InvalidArgument",
                                           "NotFound",
                                           "AlreadyExists",
                                           "OutOfSpace",
                                           "Rejected",
                                           "Corruption",
                                           "IoError",
                                           "Timeout",
                                           "Unavailable",
                                           "FailedPrecondition",
                                           "Internal",
                                           "PermissionDenied"};
  return enum_name<StatusCode::kPermissionDenied>(code, kNames, "Unknown");
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(status_code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace kvtier
