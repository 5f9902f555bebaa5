// The coordinator's Prometheus exposition (coordinator/metrics.h) and its HTTP endpoint
// (coordinator/metrics_http.h).
#include "coordinator/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/metrics_http.h"
#include "tests/testing/http.h"

namespace tandem::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ActorEntry Actor(const std::string& pool, const std::string& job, Clock::time_point heartbeat) {
  ActorEntry actor;
  actor.pool = pool;
  actor.job_id = job;
  actor.last_heartbeat = heartbeat;
  return actor;
}

StepSample Step(int64_t step, double loss) {
  StepSample s;
  s.job_id = "job-000002";
  s.name = "caption \"tiny\"";
  s.step = step;
  s.steps = 30;
  s.loss = loss;
  s.step_seconds = 0.25;
  s.samples_per_s = 32;
  s.samples = 8;
  s.vision_to_llm_bytes = 4096;
  s.llm_to_vision_bytes = 4096;
  s.vision_imbalance = 1.5;
  s.llm_imbalance = 1.25;
  s.vision_planned_imbalance = 1.125;
  s.llm_planned_imbalance = 1.0625;
  s.padding_waste = 0.125;
  s.samples_by_source = {{"shapes", 6 * step}, {"photos", 2 * step}};
  s.skipped_samples = step - 1;  // none at step 1, one at step 2
  s.vision_snapshot_bytes = {3000};
  s.llm_snapshot_bytes = {2000, 1000 * step};
  return s;
}

TEST(MetricsTest, CountsJobsByStateActorsByPoolAndStepsOfRunningJobs) {
  Metrics metrics;
  metrics.RecordStep(Step(1, 2.5));
  metrics.RecordStep(Step(2, 2.25));
  const Clock::time_point now = Clock::now();
  const std::string text =
      metrics.Render({{JobState::kSucceeded, 1}, {JobState::kRunning, 1}, {JobState::kQueued, 2}},
                     {Actor("vision", "job-000002", now), Actor("llm", "job-000002", now),
                      Actor("llm", "", now - std::chrono::seconds(30))},
                     now, std::chrono::seconds(10));

  EXPECT_THAT(text, HasSubstr("# TYPE tandem_jobs gauge\n"));
  EXPECT_THAT(text, HasSubstr("tandem_jobs{state=\"queued\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_jobs{state=\"running\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_jobs{state=\"succeeded\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_jobs{state=\"restarting\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tandem_actors{pool=\"llm\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_actors_alive{pool=\"llm\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_actors_alive{pool=\"vision\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_actors_busy{pool=\"llm\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tandem_steps_total counter\ntandem_steps_total 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_samples_total 15\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tandem_skipped_samples_total counter\n"
                              "tandem_skipped_samples_total 1\n"));
  EXPECT_THAT(text, HasSubstr("tandem_transfer_bytes_total{direction=\"vision_to_llm\"} 8192\n"));
  EXPECT_THAT(text, HasSubstr("tandem_transfer_bytes_total{direction=\"llm_to_vision\"} 8192\n"));
  const std::string labels = "{job=\"job-000002\",name=\"caption \\\"tiny\\\"\"}";
  EXPECT_THAT(text, HasSubstr("tandem_job_step" + labels + " 2\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_steps" + labels + " 30\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_loss" + labels + " 2.25\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_step_seconds" + labels + " 0.25\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_samples_per_second" + labels + " 32\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_transfer_bytes_per_step{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",direction=\"llm_to_vision\"} 4096\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_imbalance{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",group=\"vision\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_imbalance{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",group=\"llm\"} 1.25\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_planned_imbalance{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",group=\"vision\"} 1.125\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_planned_imbalance{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",group=\"llm\"} 1.0625\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_padding_waste" + labels + " 0.125\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_source_samples{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",source=\"photos\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_snapshot_bytes{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",group=\"vision\",rank=\"0\"} 3000\n"));
  EXPECT_THAT(text, HasSubstr("tandem_job_snapshot_bytes{job=\"job-000002\",name="
                              "\"caption \\\"tiny\\\"\",group=\"llm\",rank=\"1\"} 2000\n"));

  metrics.EndJob("job-000002");
  const std::string ended = metrics.Render({}, {}, now, std::chrono::seconds(10));
  EXPECT_THAT(ended, Not(HasSubstr("job-000002")));
  EXPECT_THAT(ended, HasSubstr("tandem_steps_total 2\n"));  // counters stay
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabel("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

TEST(MetricsHttpTest, ServesMetricsAndHealthAndRefusesTheRest) {
  int calls = 0;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start("127.0.0.1:0", [&] {
        ++calls;
        return std::string("tandem_steps_total 7\n");
      });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  ASSERT_THAT(address, Not(HasSubstr(":0")));

  const std::string metrics = testing::HttpGet(address, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(metrics, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(metrics, HasSubstr("Content-Length: 21\r\n"));
  EXPECT_THAT(metrics, HasSubstr("\r\n\r\ntandem_steps_total 7\n"));
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(testing::HttpGet(address, "/healthz"), HasSubstr("200 OK\r\n"));
  EXPECT_THAT(testing::HttpGet(address, "/metrics?x=1"), HasSubstr("200 OK\r\n"));
  EXPECT_THAT(testing::HttpGet(address, "/"), HasSubstr("HTTP/1.1 404 Not Found\r\n"));
  EXPECT_THAT(testing::HttpExchange(address, "POST /metrics HTTP/1.1\r\n\r\n"),
              HasSubstr("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(testing::HttpExchange(address, "nonsense\r\n\r\n"),
              HasSubstr("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_EQ(calls, 2);
}

// A client that sends a byte every 200 ms, or 40 that send nothing, used to hold the one serving
// thread (and shutdown) for as long as they liked: now a scrape beside them is answered, every
// exchange has one 5 s deadline, and stopping the server does not wait for them.
TEST(MetricsHttpTest, SlowAndIdleClientsHoldNeitherAScrapeNorShutdown) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("tandem_up 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const int slow = testing::HttpConnect(address);
  ASSERT_GE(slow, 0);
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(testing::HttpConnect(address));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string request = "GET /metrics HTTP/1.1\r\n";
    for (size_t i = 0; i < request.size() && !stop; ++i) {
      send(slow, request.data() + i, 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(testing::HttpGet(address, "/metrics"), HasSubstr("tandem_up 1\n"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));

  // The slow client's exchange ends at its deadline, its request unfinished.
  char byte;
  const timeval timeout{10, 0};
  setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(recv(slow, &byte, 1, 0), 0);  // closed by the server
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(8));
  stop = true;
  trickle.join();

  const int held = testing::HttpConnect(address);
  const auto stopping = std::chrono::steady_clock::now();
  server->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(3));
  for (int fd : idle) close(fd);
  close(held);
  close(slow);
}

// More idle clients than are served at once: the oldest of them makes room for each newcomer, so a
// scrape is answered now, not after every idle client's deadline (200 of them once held a scrape
// for half a minute, past Prometheus' 10 s timeout).
TEST(MetricsHttpTest, ManyIdleConnectionsDoNotQueueAScrapeBehindThem) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string("tandem_up 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  std::vector<int> idle;
  const auto first_idle = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) {
    idle.push_back(testing::HttpConnect(address));
    ASSERT_GE(idle.back(), 0);
  }
  EXPECT_THAT(testing::HttpGet(address, "/metrics"), HasSubstr("tandem_up 1\n"));
  // Queued behind them, the scrape would wait until every idle client in front of it had reached
  // the 5 s deadline of its exchange.
  EXPECT_LT(std::chrono::steady_clock::now() - first_idle, std::chrono::seconds(5));
  // The newest idle clients are still served (a closed one reads 0 bytes; an open one has nothing).
  int open = 0;
  for (int fd : idle) {
    char byte;
    open += recv(fd, &byte, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN ? 1 : 0;
  }
  EXPECT_GE(open, 20);
  for (int fd : idle) close(fd);
}

TEST(MetricsHttpTest, BadOrTakenAddressesAreNamed) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> bad =
      MetricsHttpServer::Start("localhost", [] { return std::string(); });
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--metrics-listen: 'localhost' is not HOST:PORT"));

  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> first =
      MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> taken =
      MetricsHttpServer::Start((*first)->address(), [] { return std::string(); });
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(),
              HasSubstr("--metrics-listen: cannot listen on " + (*first)->address()));
}

}  // namespace
}  // namespace tandem::coordinator
