// Which code compresses SHA-256's blocks (core/file_io.h Sha256): the x86 SHA extensions where
// the CPU has them (detected at run time; about 5x the portable code, which matters for a
// checkpoint's checksums: a SmolLM2 model file is 0.5 GB, verified on every load), else the
// portable code.
#pragma once

namespace dark {

bool sha256_hardware_available();
// Off: the portable code even where the extensions exist (tests check both against the same
// vectors); on: the extensions where they exist. Process-wide; returns the previous setting.
bool sha256_use_hardware(bool on);

}  // namespace dark
