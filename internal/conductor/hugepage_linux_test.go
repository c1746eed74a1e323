package conductor

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// A table past hugeTable has its slots advised for huge pages: the
// mapping that holds them carries the kernel's "hg" flag (MADV_HUGEPAGE).
func TestBigTableAdvisedHuge(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("no transparent huge pages here")
	}
	var tb table[masks]
	for i := uint64(1); int(unsafe.Sizeof(tb.slots[0]))*len(tb.slots) < 2*hugeTable; i++ {
		tb.Ptr(i * fib)
	}
	mid := uintptr(unsafe.Pointer(&tb.slots[len(tb.slots)/2]))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	in, flags := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		fs := strings.Fields(l)
		if len(fs) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fs[0], "-"); ok {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(mid) >= a && uint64(mid) < b
				continue
			}
		}
		if strings.HasPrefix(l, "VmFlags:") {
			flags = true
		}
		if in && strings.HasPrefix(l, "VmFlags:") {
			if !strings.Contains(l, " hg") {
				t.Fatalf("the slots' mapping is not advised for huge pages: %s", l)
			}
			return
		}
	}
	if !flags {
		t.Skip("smaps without VmFlags here")
	}
	t.Fatalf("no mapping holds the slots (%x)", mid)
}
