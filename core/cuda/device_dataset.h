// The synthetic classification dataset's micro-batches (core/data/dataset.h) made on a CUDA
// device from their sample indices, so that a GPU rank's step does no host work per sample
// (on one H200 the host made the 25 M MLP's batch of 64 samples x 1,024 classes in 9 ms, four
// fifths of its step; the device makes it in well under one).
//
// The same bits as SyntheticDataset: a feature is synthetic_feature (the one definition both
// compilers build); a score is the left fold fma(x[1], w[1][c], fma(x[0], w[0][c], 0)) ... over
// the features in order, each step one fused multiply-add (__fmaf_rn), as vector_ops'
// add_rows_times_matrix computes it; the label is the first class with
// the greatest score (a block's reduction picks, among equal scores, the lowest class, which is
// the host's strict-greater scan's choice whatever the order the threads meet them in).
//
// Pointers are device memory: teacher [feature_count, class_count] (a copy of
// SyntheticDataset::teacher_by_feature), sample_indices [samples], features [samples,
// feature_count], labels [samples]. Enqueues on `stream` (a cudaStream_t; nullptr: the default
// stream) and returns the launch error. Without the CUDA backend: kFailedPrecondition.
#pragma once

#include <cstdint>

#include "core/data/dataset.h"
#include "core/status.h"

namespace zerosim {

Status device_synthetic_batch(const DatasetSpec& spec, const float* teacher, const int64_t* sample_indices,
                              int64_t samples, float* features, int32_t* labels, void* stream = nullptr);

}  // namespace zerosim
