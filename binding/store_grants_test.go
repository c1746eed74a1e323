package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
)

// grantKeyFile writes a fresh grant key file and returns its path and keys.
func grantKeyFile(t *testing.T) (string, *grant.Keyring) {
	t.Helper()
	text := "# data-path grant keys\n1:" + grant.NewKeyHex() + "\n"
	path := filepath.Join(t.TempDir(), "grant.keys")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := grant.ParseKeys([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return path, keys
}

// grantMaster starts a master that signs data-path grants with keys (and
// asks proofs of mount); it closes when the test ends.
func grantMaster(t *testing.T, keys *grant.Keyring) string {
	t.Helper()
	return testMaster(t, keys).Addr()
}

// openGrantStore opens the binding's store layer over TCP against master
// with a segment of segSize bytes and the grant key file keyFile ("":
// none, as the environment says); a store that opens closes when the test
// ends.
func openGrantStore(t *testing.T, master string, segSize uint64, keyFile string) (*storeState, error) {
	t.Helper()
	s, err := openStore(t.Context(), storeArgs{host: "127.0.0.1", protocol: "tcp", master: master, segmentSize: segSize,
		bufferSize: 4 << 20, security: securityArgs{GrantKeyFile: keyFile}})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := s.close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	return s, nil
}

// TestSecurityGrantKeyFile: the "grant_key_file" option names the grant key
// file, MOONCAKE_GRANT_KEY_FILE fills it when empty, the proofs of mount it
// signs verify under the same key and no other, and a missing or
// malformed file fails setup as INVALID_PARAMS; without either there is no
// verifier and no proof.
func TestSecurityGrantKeyFile(t *testing.T) {
	t.Setenv("MOONCAKE_GRANT_KEY_FILE", "")
	path, keys := grantKeyFile(t)
	sec, err := securityArgs{}.resolve()
	if err != nil || sec.grants != nil || sec.mountProof() != nil {
		t.Fatalf("no key: %v, verifier %v; want none", err, sec.grants)
	}
	checkProof := func(name string, sec storeSecurity) {
		t.Helper()
		if sec.grants == nil {
			t.Fatalf("%s: no verifier", name)
		}
		p, err := sec.mountProof()("client-1", "127.0.0.1:12345", 1<<20, 8<<20)
		if err != nil {
			t.Fatalf("%s: proof: %v", name, err)
		}
		if err := grant.NewVerifier(keys, nil).CheckMount(p, "client-1", "127.0.0.1:12345", 1<<20, 8<<20); err != nil {
			t.Fatalf("%s: the proof does not verify under the file's key: %v", name, err)
		}
		if err := grant.NewVerifier(keys, nil).CheckMount(p, "client-2", "127.0.0.1:12345", 1<<20, 8<<20); !errors.Is(err, grant.ErrMountProof) {
			t.Fatalf("%s: the proof verifies for another client: %v", name, err)
		}
		_, other := grantKeyFile(t)
		if err := grant.NewVerifier(other, nil).CheckMount(p, "client-1", "127.0.0.1:12345", 1<<20, 8<<20); !errors.Is(err, grant.ErrMountProof) {
			t.Fatalf("%s: the proof verifies under another key: %v", name, err)
		}
	}
	sec, err = securityArgs{GrantKeyFile: path}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	checkProof("option", sec)
	t.Setenv("MOONCAKE_GRANT_KEY_FILE", path)
	sec, err = securityArgs{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	checkProof("MOONCAKE_GRANT_KEY_FILE", sec)
	t.Setenv("MOONCAKE_GRANT_KEY_FILE", filepath.Join(t.TempDir(), "missing"))
	sec, err = securityArgs{GrantKeyFile: path}.resolve()
	if err != nil {
		t.Fatalf("option over a bad env: %v", err)
	}
	checkProof("option over env", sec)

	dir := t.TempDir()
	for name, text := range map[string]string{"not-id-hex": "0123456789abcdef0123456789abcdef\n", "bad-hex": "1:zz\n",
		"short-key": "1:00112233\n", "empty": "# nothing\n", "bad-id": "x:" + grant.NewKeyHex() + "\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := securityArgs{GrantKeyFile: p}.resolve()
		if !errors.Is(err, errInvalidParams) || codeOf(err) != codeInvalidParams || !strings.Contains(err.Error(), "grant_key_file") {
			t.Errorf("key file %s: err %v, want INVALID_PARAMS naming grant_key_file", name, err)
		}
	}
	t.Setenv("MOONCAKE_GRANT_KEY_FILE", filepath.Join(dir, "missing"))
	if _, err := (securityArgs{}).resolve(); !errors.Is(err, errInvalidParams) || !strings.Contains(err.Error(), "grant_key_file") {
		t.Errorf("missing MOONCAKE_GRANT_KEY_FILE: err %v, want INVALID_PARAMS naming grant_key_file", err)
	}
}

// TestGrantSegmentMount: against a master with grants, a store with the
// grant key mounts its global segment and an extra one (proofs of mount),
// and puts and gets through both; its engine then refuses a raw READ of
// any of its memory that carries no grant (the master's grants are what
// let the puts and gets through), and serves the same READ with a grant
// signed with the key. Without the key the global segment's mount and an
// extra segment's mount are refused with INVALID_PARAMS saying how to give
// the key, while a client without a segment still works.
func TestGrantSegmentMount(t *testing.T) {
	t.Setenv("MOONCAKE_GRANT_KEY_FILE", "")
	path, keys := grantKeyFile(t)
	master := grantMaster(t, keys)

	s, err := openGrantStore(t, master, 8<<20, path)
	if err != nil {
		t.Fatalf("setup with the grant key: %v", err)
	}
	v := bytes.Repeat([]byte("granted value!"), 5000) // 70 KB: sent in place, not staged
	if err := s.put("k", v, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.get("k"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("get from the global segment: %d bytes, %v", len(got), err)
	}
	ids, _, err := s.extra.allocate(1)
	if err != nil {
		t.Fatalf("allocate_and_mount_segment with the grant key: %v", err)
	}
	w := bytes.Repeat([]byte("extra segment, granted"), 300)
	if err := s.put("x", w, store.PutOptions{PreferredSegments: ids}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.c.Stat(t.Context(), "x"); err != nil || len(info.Replicas) != 1 || info.Replicas[0].Segment != ids[0] {
		t.Fatalf("stat x: %+v, %v; want one replica on %s", info, err, ids[0])
	}
	if got, err := s.get("x"); err != nil || !bytes.Equal(got, w) {
		t.Fatalf("get from the extra segment: %d bytes, %v", len(got), err)
	}

	// A raw engine without grants reads nothing of the store's memory.
	raw, err := transfer.Open(t.Context(), transfer.Config{Transport: transfer.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	local := make([]byte, 4<<20)
	if err := raw.RegisterBytes(local, ""); err != nil {
		t.Fatal(err)
	}
	seg, err := raw.OpenSegment(t.Context(), s.eng.Name())
	if err != nil {
		t.Fatal(err)
	}
	bufs := s.eng.Buffers()
	if len(bufs) < 3 { // the global segment, the staging buffer, the extra segment
		t.Fatalf("store engine serves %d buffers, want at least 3", len(bufs))
	}
	denied := s.eng.GrantStats().Denied
	for _, b := range bufs {
		n := int(min(b.Length, uint64(len(local))))
		err := raw.Transfer(t.Context(), []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(local), Segment: seg, Remote: b.Addr, Length: n}})
		if !errors.Is(err, transfer.ErrDenied) {
			t.Errorf("raw READ of %d bytes at %#x without a grant: %v, want ErrDenied", n, b.Addr, err)
		}
	}
	if got := s.eng.GrantStats().Denied - denied; got < uint64(len(bufs)) {
		t.Errorf("the store's engine denied %d requests, want %d", got, len(bufs))
	}
	// The same READ of the extra segment with a grant signed with the key
	// is served: what refused the others was the missing grant.
	mem := s.extra.segs[ids[0]].mem
	g, err := keys.Encode(grant.Grant{Segment: s.eng.Name(), Addr: uint64(transfer.AddrOf(mem)), Length: uint64(len(mem)),
		Mode: grant.Read, Expires: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	clear(local)
	if err := raw.Transfer(t.Context(), []transfer.Request{{Op: transfer.OpRead, Local: transfer.AddrOf(local), Segment: seg,
		Remote: uint64(transfer.AddrOf(mem)), Length: len(mem), Grant: string(g)}}); err != nil {
		t.Fatalf("raw READ with a grant: %v", err)
	}
	if !bytes.Contains(local, w) {
		t.Fatal("the granted READ of the extra segment does not hold the value put there")
	}

	// Without the key: the mounts are refused, a pure client works.
	if _, err := openGrantStore(t, master, 8<<20, ""); err == nil || codeOf(err) != codeInvalidParams || !strings.Contains(err.Error(), "MOONCAKE_GRANT_KEY_FILE") {
		t.Fatalf("setup with a segment, without the key: err %v (code %d), want INVALID_PARAMS naming MOONCAKE_GRANT_KEY_FILE", err, codeOf(err))
	}
	p, err := openGrantStore(t, master, 0, "")
	if err != nil {
		t.Fatalf("setup without a segment, without the key: %v", err)
	}
	if got, err := p.get("k"); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("pure client get: %d bytes, %v", len(got), err)
	}
	if _, _, err := p.extra.allocate(1); err == nil || codeOf(err) != codeInvalidParams || !strings.Contains(err.Error(), "MOONCAKE_GRANT_KEY_FILE") {
		t.Fatalf("allocate_and_mount_segment without the key: err %v (code %d), want INVALID_PARAMS naming MOONCAKE_GRANT_KEY_FILE", err, codeOf(err))
	}
	if len(p.extra.segs) != 0 {
		t.Fatalf("%d extra segments kept after a refused mount", len(p.extra.segs))
	}
}
