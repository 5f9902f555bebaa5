// Early-return helpers for absl::Status / absl::StatusOr, as in Abseil-using codebases.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_CONCAT_INNER(a, b) a##b
#define TANDEM_CONCAT(a, b) TANDEM_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status _tandem_status = (expr);          \
    if (!_tandem_status.ok()) return _tandem_status; \
  } while (0)

// Evaluates a StatusOr expression; on error returns its status, else moves the value into lhs.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(TANDEM_CONCAT(_tandem_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
