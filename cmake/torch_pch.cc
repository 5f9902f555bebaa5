// The translation unit that carries the precompiled <torch/torch.h> every LibTorch target reuses
// (tandem_torch_pch in cmake/tandem.cmake).
