#include "data/text_codec.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace tandem::data {
namespace {

constexpr char kImage[] = "<image>";

}  // namespace

std::string ConversationWords(const std::vector<tokenizer::ChatMessage>& messages) {
  std::string out;
  for (const auto& message : messages) {
    absl::StrAppend(&out, out.empty() ? "" : " ",
                    absl::StrReplaceAll(message.content, {{kImage, " "}}));
  }
  return out;
}

TextCodec TextCodec::Words(Tokenizer tokenizer) {
  TextCodec codec;
  codec.words_ = std::move(tokenizer);
  return codec;
}

TextCodec TextCodec::WordsAtMarks(Tokenizer tokenizer, int64_t image_tokens,
                                  AnyResGeometry any_res) {
  TextCodec codec;
  codec.image_token_id_ = tokenizer.size();
  codec.image_tokens_ = image_tokens;
  codec.any_res_ = std::move(any_res);
  codec.words_ = std::move(tokenizer);
  return codec;
}

absl::StatusOr<TextCodec> TextCodec::Hf(tokenizer::HfTokenizer tokenizer,
                                        tokenizer::ChatTemplate chat, int64_t image_tokens,
                                        AnyResGeometry any_res) {
  const auto image = tokenizer.TokenToId(kImage);
  if (!image) return absl::InvalidArgumentError("the tokenizer has no \"<image>\" token");
  const auto eos = tokenizer.eos_id();
  const std::string& turn_end = chat.end_of_turn();
  const auto end = turn_end.empty() ? eos : tokenizer.TokenToId(turn_end);
  if (!end) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has no \"", turn_end,
                                                   "\" token, which ends a turn in ", chat.name(),
                                                   "'s chat template"));
  }
  // transformers' LLaVA recipes pad with the pad token, else with eos; the padding is never a
  // target and a causal model never attends to it from the positions before.
  const auto pad = tokenizer.pad_id() ? tokenizer.pad_id() : eos;
  if (!pad) return absl::InvalidArgumentError("the tokenizer has neither a pad nor an eos token");
  TextCodec codec;
  codec.stop_ids_ = {*end};
  if (eos && *eos != *end) codec.stop_ids_.push_back(*eos);
  codec.pad_id_ = *pad;
  codec.image_token_id_ = *image;
  codec.image_tokens_ = image_tokens;
  codec.any_res_ = std::move(any_res);
  codec.chat_ = std::move(chat);
  codec.hf_ = std::move(tokenizer);
  return codec;
}

int64_t TextCodec::vocab_size() const {
  if (hf_) return hf_->vocab_size();
  return words_->size() + (image_token_id_ >= 0 ? 1 : 0);
}

std::string TextCodec::Decode(const std::vector<int64_t>& ids) const {
  if (hf_) return hf_->Decode(ids, /*skip_special_tokens=*/true);
  return words_->Decode(std::vector<int32_t>(ids.begin(), ids.end()));
}

std::vector<int64_t> TextCodec::ImagePositions(const std::vector<Resolution>& image_sizes) const {
  std::vector<int64_t> positions;
  for (const Resolution& size : image_sizes) {
    positions.push_back(any_res_.enabled() ? any_res_.Layout(size).positions() : image_tokens_);
  }
  return positions;
}

absl::StatusOr<EncodedConversation> TextCodec::Encode(
    const std::vector<tokenizer::ChatMessage>& messages, const std::string& source,
    const std::vector<Resolution>& image_sizes) const {
  if (hf_) {
    return EncodeMessages(
        messages, source, *hf_, *chat_, image_tokens_, /*add_generation_prompt=*/false,
        any_res_.enabled() ? ImagePositions(image_sizes) : std::vector<int64_t>{});
  }
  EncodedConversation out;
  const auto add = [&out](int64_t id, bool labelled, int64_t copies = 1) {
    out.ids.insert(out.ids.end(), copies, id);
    out.labels.insert(out.labels.end(), copies, labelled ? id : EncodedConversation::kIgnore);
  };
  // WordsAtMarks: the positions of each mark's image, as EncodeMessages places them.
  const std::vector<int64_t> positions =
      any_res_.enabled() ? ImagePositions(image_sizes) : std::vector<int64_t>{};
  size_t marks = 0;
  for (const auto& message : messages) {
    const bool answer = message.role == "assistant";
    bool first = true;
    for (const absl::string_view piece : absl::StrSplit(message.content, kImage)) {
      if (!first && image_token_id_ >= 0) {
        int64_t copies = image_tokens_;
        if (any_res_.enabled()) {
          if (marks == positions.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat(source, ": has more \"<image>\" marks than its ", positions.size(),
                             positions.size() == 1 ? " image" : " images"));
          }
          copies = positions[marks];
        }
        ++marks;
        add(image_token_id_, /*labelled=*/false, copies);
      }
      first = false;
      for (int32_t id : words_->Encode(std::string_view(piece.data(), piece.size())))
        add(id, answer);
    }
    add(answer ? Tokenizer::kEos : Tokenizer::kBos, answer);
  }
  if (marks < positions.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": has ", marks, " \"<image>\" marks for ", positions.size(), " images"));
  }
  return out;
}

absl::StatusOr<TextCodec::Prompt> TextCodec::EncodePrompt(
    const std::vector<tokenizer::ChatMessage>& messages, const std::string& source,
    const std::vector<Resolution>& image_sizes) const {
  if (messages.empty() || messages.back().role != "assistant") {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": the last message is not the assistant's, so there is "
                     "no answer to evaluate"));
  }
  const std::vector<tokenizer::ChatMessage> asked(messages.begin(), messages.end() - 1);
  Prompt prompt;
  if (hf_) {
    ASSIGN_OR_RETURN(auto encoded, EncodeMessages(asked, source, *hf_, *chat_, image_tokens_,
                                                  /*add_generation_prompt=*/true,
                                                  any_res_.enabled() ? ImagePositions(image_sizes)
                                                                     : std::vector<int64_t>{}));
    prompt.ids = std::move(encoded.ids);
  } else {
    ASSIGN_OR_RETURN(auto encoded, Encode(asked, source, image_sizes));
    prompt.ids = std::move(encoded.ids);
  }
  // The answer is the last run of labelled positions of the whole conversation, less its end of
  // turn.
  ASSIGN_OR_RETURN(const EncodedConversation whole, Encode(messages, source, image_sizes));
  size_t end = whole.labels.size();
  while (end > 0 && whole.labels[end - 1] == EncodedConversation::kIgnore) --end;
  size_t begin = end;
  while (begin > 0 && whole.labels[begin - 1] != EncodedConversation::kIgnore) --begin;
  prompt.answer.assign(whole.labels.begin() + static_cast<std::ptrdiff_t>(begin),
                       whole.labels.begin() + static_cast<std::ptrdiff_t>(end));
  if (!prompt.answer.empty() &&
      std::find(stop_ids_.begin(), stop_ids_.end(), prompt.answer.back()) != stop_ids_.end()) {
    prompt.answer.pop_back();
  }
  if (prompt.ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": nothing comes before the answer to prompt with"));
  }
  return prompt;
}

}  // namespace tandem::data
