#pragma once

namespace tandem {

// Keeps glibc malloc from returning large blocks to the OS after every use. By default a block of
// 128 KiB or more is its own mmap, unmapped when freed, so every 1 MiB transport chunk, gRPC read
// buffer and mid-sized CPU tensor is a fresh mapping whose pages fault in on first touch; on a
// virtual machine those faults cost more than the copy itself (bench/README.md, Transport). This
// serves blocks below 32 MiB from the heap and trims the heap only when 128 MiB or more lie free at
// its top.
//
// Call first thing in main, before any thread starts. Does nothing when GLIBC_TUNABLES already sets
// a malloc tunable (the operator's choice wins) or off glibc. Returns whether it changed anything.
bool TuneMallocForLargeBuffers();

}  // namespace tandem
