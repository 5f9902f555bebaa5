// libFuzzer target: a LLaVA conversation file (data/conversation.h), a JSON list or JSONL, opened
// as a job opens it (data/conversation_dataset.h), and its first sample read. Beyond "no crash,
// no hang, no leak": every conversation that reads has messages, and a sample that reads is an
// 8 x 8 image.
#include "data/conversation.h"
#include "data/conversation_dataset.h"
#include "fuzz/data_file_fuzzer_main.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::WriteInput(data, size, "train.json");
  auto conversations = tandem::data::ReadConversations(path);
  if (!conversations.ok()) return 0;
  for (const tandem::data::Conversation& c : *conversations) {
    if (c.messages.empty()) std::abort();
  }
  auto dataset = tandem::data::ConversationDataset::Open(path, 8);
  if (!dataset.ok()) return 0;
  auto example = (*dataset)->Get(0);
  if (example.ok() && (example->image.height != 8 || example->image.width != 8)) std::abort();
  return 0;
}
