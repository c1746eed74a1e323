package storeerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestCodeTable(t *testing.T) {
	for _, e := range codeTable {
		t.Run(e.err.Error(), func(t *testing.T) {
			wrapped := fmt.Errorf("master: %w: detail", e.err)
			if got := Code(wrapped); got != e.code {
				t.Fatalf("Code(%v) = %d, want %d", wrapped, got, e.code)
			}
			if got := ErrorOf(e.code); got != e.err {
				t.Fatalf("ErrorOf(%d) = %v, want %v", e.code, got, e.err)
			}
		})
	}
	if Code(nil) != CodeOK || ErrorOf(CodeOK) != nil {
		t.Fatal("nil does not map to CodeOK and back")
	}
	if Code(errors.New("x")) != CodeInternal || !errors.Is(ErrorOf(-12345), ErrInternal) || !errors.Is(ErrorOf(CodeInternal), ErrInternal) {
		t.Fatal("unknown errors and codes are not internal")
	}
}
