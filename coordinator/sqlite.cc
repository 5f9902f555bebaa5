#include "coordinator/sqlite.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::coordinator {
namespace {

constexpr int kBusyTimeoutMs = 5000;
constexpr char kBegin[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";

absl::StatusCode CodeOf(int result) {
  switch (result & 0xff) {
    case SQLITE_NOTADB:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_TOOBIG:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<what>: <SQLite's message>"; the errno's code (and strerror) when a system call failed.
absl::Status SqliteError(sqlite3* db, int result, absl::string_view what) {
  const bool detailed = db != nullptr && sqlite3_extended_errcode(db) == result;
  const std::string message =
      absl::StrCat(what, ": ", detailed ? sqlite3_errmsg(db) : sqlite3_errstr(result));
  const int primary = result & 0xff;
  const int system_errno = db != nullptr ? sqlite3_system_errno(db) : 0;
  if ((primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR) && system_errno != 0) {
    return absl::ErrnoToStatus(system_errno, message);
  }
  return absl::Status(CodeOf(result), message);
}

}  // namespace

Statement::Statement(Statement&& other) noexcept
    : statement_(std::exchange(other.statement_, nullptr)), bind_result_(other.bind_result_) {}

Statement::~Statement() {
  if (statement_ == nullptr) return;
  sqlite3_reset(statement_);
  sqlite3_clear_bindings(statement_);
}

Statement& Statement::BindInt(int index, int64_t value) {
  return Check(sqlite3_bind_int64(statement_, index, value));
}

Statement& Statement::BindReal(int index, double value) {
  if (std::isnan(value)) return Check(sqlite3_bind_null(statement_, index));
  return Check(sqlite3_bind_double(statement_, index, value));
}

Statement& Statement::BindText(int index, const std::string& value) {
  return Check(sqlite3_bind_text64(statement_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                   SQLITE_UTF8));
}

absl::StatusOr<bool> Statement::Next(absl::string_view what) {
  sqlite3* db = sqlite3_db_handle(statement_);
  if (bind_result_ != SQLITE_OK) return SqliteError(db, bind_result_, what);
  const int result = sqlite3_step(statement_);
  if (result == SQLITE_ROW) return true;
  if (result == SQLITE_DONE) return false;
  return SqliteError(db, result, what);
}

absl::StatusOr<std::optional<int64_t>> Statement::FirstInt(absl::string_view what) {
  ASSIGN_OR_RETURN(const bool row, Next(what));
  if (!row || sqlite3_column_type(statement_, 0) == SQLITE_NULL) return std::nullopt;
  return ReadInt(0);
}

int64_t Statement::ReadInt(int column) const { return sqlite3_column_int64(statement_, column); }

double Statement::ReadReal(int column) const {
  if (sqlite3_column_type(statement_, column) == SQLITE_NULL) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return sqlite3_column_double(statement_, column);
}

std::string Statement::ReadText(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(statement_, column));
  if (text == nullptr) return "";
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(statement_, column)));
}

Statement& Statement::Check(int result) {
  if (result != SQLITE_OK && bind_result_ == SQLITE_OK) bind_result_ = result;
  return *this;
}

absl::StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                                         absl::string_view what) {
  sqlite3* db = nullptr;
  const int result = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  // SQLite hands out a handle even when opening fails; the connection closes it either way.
  std::unique_ptr<SqliteConnection> connection(new SqliteConnection(db));
  if (result != SQLITE_OK) return SqliteError(db, result, what);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  return connection;
}

SqliteConnection::~SqliteConnection() {
  for (auto& [sql, statement] : statements_) sqlite3_finalize(statement);
  sqlite3_close_v2(db_);
}

absl::StatusOr<Statement> SqliteConnection::Prepare(const char* sql, absl::string_view what) {
  sqlite3_stmt*& statement = statements_[sql];
  if (statement == nullptr) {
    const int result =
        sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &statement, nullptr);
    if (result != SQLITE_OK) {
      statements_.erase(sql);
      return SqliteError(db_, result, what);
    }
  }
  return Statement(statement);
}

absl::Status SqliteConnection::Execute(const char* sql, absl::string_view what) {
  ASSIGN_OR_RETURN(Statement statement, Prepare(sql, what));
  return statement.Run(what);
}

absl::Status SqliteConnection::ExecuteScript(const char* sql, absl::string_view what) {
  const int result = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (result != SQLITE_OK) return SqliteError(db_, result, what);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> SqliteConnection::QueryInt(const char* sql,
                                                                  absl::string_view what) {
  ASSIGN_OR_RETURN(Statement statement, Prepare(sql, what));
  return statement.FirstInt(what);
}

absl::Status SqliteConnection::InTransaction(absl::string_view what,
                                             const std::function<absl::Status()>& body) {
  RETURN_IF_ERROR(Execute(kBegin, what));
  absl::Status status = body();
  if (status.ok()) status = Execute(kCommit, what);
  if (!status.ok() && !sqlite3_get_autocommit(db_)) {
    // `status` already says what failed; a failed rollback adds nothing to it.
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  return status;
}

int64_t SqliteConnection::Changes() const { return sqlite3_changes64(db_); }

}  // namespace tandem::coordinator
