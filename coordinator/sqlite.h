// A small wrapper over SQLite's C API for the job store (job_store.h): a connection with a cache of
// prepared statements, and a Statement to bind, step and read them. The header does not include
// <sqlite3.h>.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SqliteConnection> db, SqliteConnection::Open(path, what));
//   ASSIGN_OR_RETURN(Statement query, db->Prepare(kGetJob, what));
//   query.BindText(1, id);
//   ASSIGN_OR_RETURN(const bool found, query.Next(what));
//   if (found) name = query.ReadText(1);
//
// Errors: every failure is a Status whose message is "<what>: <SQLite's message>", `what` being the
// caller's description of the work ("reading job job-000001 from /s/tandem.db"). Codes: a file that
// is not a database -> FailedPrecondition, corruption -> DataLoss, busy or locked -> Unavailable,
// permission or read-only -> PermissionDenied, disk full -> ResourceExhausted, too big ->
// InvalidArgument, an open or I/O error with an errno -> that errno's code, anything else ->
// Internal.
//
// Thread-safety: none. A connection and its statements belong to one thread at a time (the job
// store's mutex guards them); the connection is opened with SQLITE_OPEN_NOMUTEX.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tandem::coordinator {

// A prepared statement on loan from a SqliteConnection's cache: bind, step, read columns. Resets
// the statement and clears its bindings when it goes away, which also ends a write (an UPDATE ...
// RETURNING) before its transaction commits.
class Statement {
 public:
  explicit Statement(sqlite3_stmt* statement) : statement_(statement) {}
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Parameters are numbered from 1. A failure shows up in the next Next or Run. BindReal stores NaN
  // as NULL (SQLite would anyway), and ReadReal turns NULL back into NaN.
  Statement& BindInt(int index, int64_t value);
  Statement& BindReal(int index, double value);
  Statement& BindText(int index, const std::string& value);

  // Steps to the next row: true when there is one, false when the statement is done.
  absl::StatusOr<bool> Next(absl::string_view what);
  // Runs a statement that returns no rows.
  absl::Status Run(absl::string_view what) { return Next(what).status(); }
  // Column 0 of the first row; nullopt when there is no row or it is NULL.
  absl::StatusOr<std::optional<int64_t>> FirstInt(absl::string_view what);

  // Columns of the current row, numbered from 0.
  int64_t ReadInt(int column) const;
  double ReadReal(int column) const;
  std::string ReadText(int column) const;  // "" for NULL

 private:
  Statement& Check(int result);

  sqlite3_stmt* statement_;
  int bind_result_ = 0;  // SQLITE_OK, or the first failed bind's result
};

// One SQLite connection with a cache of prepared statements.
class SqliteConnection {
 public:
  // Opens (or creates) the database file with extended result codes and a busy timeout of 5 s (how
  // long a statement waits for a lock another process, the sqlite3 shell, holds); reads and writes
  // nothing yet.
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path,
                                                                absl::string_view what);
  ~SqliteConnection();
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  // The cached statement for `sql`. REQUIRES: `sql` is a constant with static storage: the cache
  // is keyed by its address. Each statement is on loan to one Statement at a time.
  absl::StatusOr<Statement> Prepare(const char* sql, absl::string_view what);
  // Runs a statement with no parameters and no rows.
  absl::Status Execute(const char* sql, absl::string_view what);
  // Runs several statements once, without caching them (schema creation, pragmas).
  absl::Status ExecuteScript(const char* sql, absl::string_view what);
  // Column 0 of the first row of a query without parameters; nullopt for no row or NULL.
  absl::StatusOr<std::optional<int64_t>> QueryInt(const char* sql, absl::string_view what);
  // Runs `body` in a write transaction (BEGIN IMMEDIATE): commits when it returns OK, rolls back
  // otherwise; returns body's error, else the commit's.
  absl::Status InTransaction(absl::string_view what, const std::function<absl::Status()>& body);
  // Rows changed by the last INSERT, UPDATE or DELETE.
  int64_t Changes() const;

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}

  sqlite3* const db_;
  std::unordered_map<const char*, sqlite3_stmt*> statements_;
};

}  // namespace tandem::coordinator
