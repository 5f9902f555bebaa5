#include "step/job_data.h"

#include <utility>

#include "common/status_macros.h"

namespace tandem::step {

absl::StatusOr<std::shared_ptr<const JobData>> OpenJobData(const jobspec::JobConfig& job) {
  ASSIGN_OR_RETURN(data::Datasets datasets,
                   data::OpenDatasets(job.data, job.vision.model.image_size, job.spec_dir));
  data::Tokenizer tokenizer = data::Tokenizer::Build(data::AllTexts(*datasets.train));
  return std::make_shared<const JobData>(JobData{std::move(datasets), std::move(tokenizer)});
}

}  // namespace tandem::step
