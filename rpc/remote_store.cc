#include "rpc/remote_store.h"

#include "absl/strings/str_cat.h"
#include "proto/tandem/v1/coordinator.grpc.pb.h"
#include "rpc/channel.h"
#include "rpc/status.h"

namespace tandem::rpc {
namespace {

constexpr std::chrono::milliseconds kCallTimeout{30000};

class RemoteStore : public KeyValueStore {
 public:
  explicit RemoteStore(const std::string& address)
      : address_(address), stub_(v1::Coordinator::NewStub(MakeChannel(address))) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    v1::StoreSetRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::StoreSetResponse response;
    return FromGrpc(stub_->StoreSet(ContextWithTimeout(kCallTimeout).get(), request, &response),
                    What("set", key));
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    v1::StoreGetRequest request;
    request.set_key(key);
    request.set_timeout_ms(timeout.count());
    v1::StoreGetResponse response;
    absl::Status status = FromGrpc(
        stub_->StoreGet(ContextWithTimeout(timeout + kCallTimeout).get(), request, &response),
        What("get", key));
    if (!status.ok()) return status;
    return response.value();
  }

  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    v1::StoreAddRequest request;
    request.set_key(key);
    request.set_delta(delta);
    v1::StoreAddResponse response;
    absl::Status status =
        FromGrpc(stub_->StoreAdd(ContextWithTimeout(kCallTimeout).get(), request, &response),
                 What("add", key));
    if (!status.ok()) return status;
    return response.value();
  }

  absl::StatusOr<bool> Check(const std::string& key) override {
    v1::StoreCheckRequest request;
    request.set_key(key);
    v1::StoreCheckResponse response;
    absl::Status status =
        FromGrpc(stub_->StoreCheck(ContextWithTimeout(kCallTimeout).get(), request, &response),
                 What("check", key));
    if (!status.ok()) return status;
    return response.present();
  }

  absl::Status Delete(const std::string& key) override {
    v1::StoreDeleteRequest request;
    request.set_key(key);
    v1::StoreDeleteResponse response;
    return FromGrpc(stub_->StoreDelete(ContextWithTimeout(kCallTimeout).get(), request, &response),
                    What("delete", key));
  }

 private:
  std::string What(const char* op, const std::string& key) const {
    return absl::StrCat("rendezvous store at ", address_, ": ", op, " ", key);
  }

  std::string address_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace

std::shared_ptr<KeyValueStore> CreateRemoteStore(const std::string& coordinator_address) {
  return std::make_shared<RemoteStore>(coordinator_address);
}

}  // namespace tandem::rpc
