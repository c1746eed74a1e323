package mooncakestore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	store "github.com/kvcache-ai/Mooncake/mooncake-store/go/mooncakestore"
)

// The master these tests use: MC_MASTER_ADDR, as Mooncake's example reads
// it. internal/e2e's TestGoBinding starts a master and a storage node and
// runs this package against them.
func master(t *testing.T) string {
	m := os.Getenv("MC_MASTER_ADDR")
	if m == "" {
		t.Skip("MC_MASTER_ADDR is not set: needs a running master and storage node (internal/e2e TestGoBinding starts them)")
	}
	return m
}

func open(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Setup("127.0.0.1", "P2PHANDSHAKE", 64<<20, 16<<20, "tcp", "", master(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestWholeAPI(t *testing.T) {
	s := open(t)
	if err := s.HealthCheck(); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Hostname(); err != nil || h != "127.0.0.1" {
		t.Fatalf("Hostname = %q, %v", h, err)
	}
	if _, err := s.RemoveByRegex("^gobind/", true); err != nil {
		t.Fatal(err)
	}

	// Put, a second Put of the same key (kept, as Mooncake does), Get.
	if err := s.Put("gobind/a", []byte("first"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("gobind/a", []byte("second"), nil); err != nil {
		t.Fatalf("Put of an existing key: %v", err)
	}
	buf := make([]byte, 16)
	if n, err := s.Get("gobind/a", buf); err != nil || string(buf[:n]) != "first" {
		t.Fatalf("Get = %q, %v", buf[:n], err)
	}
	if err := s.Put("gobind/bad", []byte("x"), &store.ReplicateConfig{}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("Put with 0 replicas: %v", err)
	}

	// Registered memory: PutFrom, BatchPutFrom, GetInto, BatchGetInto.
	region := make([]byte, 1<<20)
	base := uintptr(unsafe.Pointer(&region[0]))
	if err := s.RegisterBuffer(base, uint64(len(region))); err != nil {
		t.Fatal(err)
	}
	for i := range region[:4096] {
		region[i] = byte(i * 7)
	}
	if err := s.PutFrom("gobind/from", base, 1024, nil); err != nil {
		t.Fatal(err)
	}
	keys := []string{"gobind/b0", "gobind/b1", "gobind/b2"}
	ptrs := []uintptr{base + 1024, base + 2048, base + 3072}
	sizes := []uint64{1024, 1024, 1024}
	res, err := s.BatchPutFrom(keys, ptrs, sizes, &store.ReplicateConfig{ReplicaNum: 1, WithSoftPin: true})
	if err != nil || len(res) != 3 || res[0] != 0 || res[1] != 0 || res[2] != 0 {
		t.Fatalf("BatchPutFrom = %v, %v", res, err)
	}
	if size, err := s.GetSize("gobind/b1"); err != nil || size != 1024 {
		t.Fatalf("GetSize = %d, %v", size, err)
	}
	dst := base + 512<<10
	if n, err := s.GetInto("gobind/from", dst, 4096); err != nil || n != 1024 ||
		!bytes.Equal(region[512<<10:512<<10+1024], region[:1024]) {
		t.Fatalf("GetInto = %d, %v (or wrong bytes)", n, err)
	}
	got, err := s.BatchGetInto(append(keys, "gobind/missing"),
		[]uintptr{dst, dst + 1024, dst + 2048, dst + 3072}, []uint64{1024, 1024, 1024, 1024})
	if err != nil || fmt.Sprint(got) != "[1024 1024 1024 -704]" {
		t.Fatalf("BatchGetInto = %v, %v", got, err)
	}
	if !bytes.Equal(region[512<<10:512<<10+3072], region[1024:4096]) {
		t.Fatal("BatchGetInto read wrong bytes")
	}
	// Unregistered memory works too (staged).
	plain := []byte("plain memory")
	if err := s.PutFrom("gobind/plain", uintptr(unsafe.Pointer(&plain[0])), uint64(len(plain)), nil); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 32)
	if n, err := s.GetInto("gobind/plain", uintptr(unsafe.Pointer(&out[0])), uint64(len(out))); err != nil ||
		string(out[:n]) != "plain memory" {
		t.Fatalf("GetInto(plain) = %q, %v", out[:n], err)
	}
	if err := s.UnregisterBuffer(base); err != nil {
		t.Fatal(err)
	}
	if err := s.UnregisterBuffer(base); !errors.Is(err, store.ErrUnregisterBuffer) {
		t.Fatalf("second UnregisterBuffer: %v", err)
	}

	// Existence, removal.
	ex, err := s.BatchExists([]string{"gobind/a", "gobind/missing", "gobind/b2"})
	if err != nil || fmt.Sprint(ex) != "[true false true]" {
		t.Fatalf("BatchExists = %v, %v", ex, err)
	}
	if _, err := s.GetSize("gobind/missing"); !errors.Is(err, store.ErrGetSize) {
		t.Fatalf("GetSize(missing): %v", err)
	}
	if _, err := s.Get("gobind/missing", buf); !errors.Is(err, store.ErrGet) {
		t.Fatalf("Get(missing): %v", err)
	}
	if err := s.Remove("gobind/a", true); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Exists("gobind/a"); err != nil || ok {
		t.Fatalf("Exists after Remove = %v, %v", ok, err)
	}
	if err := s.Remove("gobind/a", true); !errors.Is(err, store.ErrRemove) {
		t.Fatalf("Remove(missing): %v", err)
	}
	if n, err := s.RemoveByRegex("^gobind/b[0-9]$", true); err != nil || n != 3 {
		t.Fatalf("RemoveByRegex = %d, %v", n, err)
	}
	if _, err := s.RemoveByRegex("^gobind/", true); err != nil {
		t.Fatal(err)
	}

	// After Close every call fails with ErrStoreNil.
	s.Close()
	if err := s.Put("gobind/late", []byte("x"), nil); !errors.Is(err, store.ErrStoreNil) {
		t.Fatalf("Put after Close: %v", err)
	}
}

func TestNotSetUp(t *testing.T) {
	s, _ := store.New()
	if _, err := s.Exists("k"); !errors.Is(err, store.ErrStoreNil) {
		t.Fatalf("Exists before Setup: %v", err)
	}
	if err := s.Setup("127.0.0.1", "", 0, 0, "tcp", "", ""); !errors.Is(err, store.ErrSetupFailed) {
		t.Fatalf("Setup without master: %v", err)
	}
	var nilStore *store.Store
	if err := nilStore.HealthCheck(); !errors.Is(err, store.ErrStoreNil) {
		t.Fatalf("nil store: %v", err)
	}
}
