package conductor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge asks the kernel to back the 2 MiB-aligned part of a big
// table's slots with transparent huge pages (MADV_HUGEPAGE: where THP is
// "madvise", the common default, nothing else gets them). A lookup in a
// table of a million blocks lands on a random page of tens of megabytes:
// with 4 KiB pages nearly every lookup of a long prompt misses the TLB and
// walks the page tables (twice over in a virtual machine), with 2 MiB
// pages the whole table fits the TLB. The slots are fresh from the heap
// and hold no pointers; the advice changes how they are backed, not what
// they hold, and is dropped silently where the kernel refuses it.
func adviseHuge(p unsafe.Pointer, size uintptr) {
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + size) &^ (huge - 1)
	if end <= start {
		return
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start), unix.MADV_HUGEPAGE)
}
