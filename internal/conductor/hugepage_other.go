//go:build !linux

package conductor

import "unsafe"

// adviseHuge is a no-op off Linux (see hugepage_linux.go).
func adviseHuge(unsafe.Pointer, uintptr) {}
