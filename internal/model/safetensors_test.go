package model

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	m, err := NewBuiltin("tiny", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []string{"F32", "F16", "BF16"} {
		t.Run(dt, func(t *testing.T) {
			dir := t.TempDir()
			if err := m.Save(dir, dt); err != nil {
				t.Fatal(err)
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.NumParams() != m.NumParams() {
				t.Fatalf("params %d want %d", got.NumParams(), m.NumParams())
			}
			tol := map[string]float64{"F32": 0, "F16": 1e-3, "BF16": 8e-3}[dt]
			wt, gt := m.Tensors(), got.Tensors()
			for i := range wt {
				for j := range wt[i].Data {
					a, b := float64(wt[i].Data[j]), float64(gt[i].Data[j])
					if math.Abs(a-b) > tol*math.Max(1, math.Abs(a)) {
						t.Fatalf("%s[%d] = %v want %v", wt[i].Name, j, b, a)
					}
				}
			}
		})
	}
}

func TestHalfConversions(t *testing.T) {
	for _, f := range []float32{0, 1, -2.5, 65504, 6.1035156e-05, 5.9604645e-08, 0.1} {
		if g := f16ToF32(F32ToF16(f)); math.Abs(float64(g-f)) > math.Abs(float64(f))*1e-3 {
			t.Errorf("f16 %v -> %v", f, g)
		}
	}
	if !math.IsInf(float64(f16ToF32(F32ToF16(1e6))), 1) {
		t.Error("f16 overflow should be +Inf")
	}
	if F32ToBF16(1) != 0x3f80 {
		t.Errorf("bf16(1) = %#x", F32ToBF16(1))
	}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejectsUnsupported(t *testing.T) {
	m, _ := NewBuiltin("tiny", 1)
	base := t.TempDir()
	if err := m.Save(base, "F32"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(base, "config.json"))
	tests := []struct {
		name   string
		mutate func(dir string)
		want   string
	}{
		{"rope scaling", func(d string) {
			writeFile(t, d, "config.json", strings.Replace(string(cfg), `"model_type"`, `"rope_scaling": {"type": "linear", "factor": 2}, "model_type"`, 1))
		}, "rope_scaling"},
		{"gpt2", func(d string) { writeFile(t, d, "config.json", strings.Replace(string(cfg), `"llama"`, `"gpt2"`, 1)) }, "model_type"},
		{"gelu", func(d string) { writeFile(t, d, "config.json", strings.Replace(string(cfg), `"silu"`, `"gelu"`, 1)) }, "hidden_act"},
		{"sharded", func(d string) {
			os.Remove(filepath.Join(d, "model.safetensors"))
			writeFile(t, d, "model.safetensors.index.json", `{}`)
		}, "sharded"},
		{"wrong shape", func(d string) {
			writeFile(t, d, "config.json", strings.Replace(string(cfg), `"intermediate_size": 160`, `"intermediate_size": 128`, 1))
		}, "shape"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"config.json", "model.safetensors"} {
				b, _ := os.ReadFile(filepath.Join(base, f))
				writeFile(t, dir, f, string(b))
			}
			tc.mutate(dir)
			_, err := Load(dir)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrUnsupported mentioning %q", err, tc.want)
			}
		})
	}
}

func header(h string) []byte {
	b := make([]byte, 8, 8+len(h))
	binary.LittleEndian.PutUint64(b, uint64(len(h)))
	return append(b, h...)
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name string
		head []byte
		size int64
	}{
		{"short", []byte{1, 2}, 2},
		{"length beyond file", header(`{}`)[:8], 100},
		{"bad json", header(`{"a":`), 14},
		{"bad dtype", header(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`), 1000},
		{"offsets mismatch", header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`), 1000},
		{"offsets past end", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), 60},
		{"negative shape", header(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`), 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ParseSafetensorsHeader(tc.head, tc.size); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	ok := header(`{"__metadata__":{"x":"y"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`)
	e, start, err := ParseSafetensorsHeader(ok, int64(len(ok))+8)
	if err != nil || start != int64(len(ok)) || e["a"].DType != "BF16" {
		t.Fatalf("valid header: %v %v %v", e, start, err)
	}
}

func FuzzParseSafetensorsHeader(f *testing.F) {
	f.Add(header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), int64(100))
	f.Add(header(`{"__metadata__":{},"b":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}}`), int64(200))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(8))
	f.Fuzz(func(t *testing.T, head []byte, size int64) {
		entries, start, err := ParseSafetensorsHeader(head, size)
		if err != nil {
			return
		}
		for name, e := range entries {
			if e.DataOffsets[0] < 0 || start+e.DataOffsets[1] > size {
				t.Fatalf("%s: accepted offsets %v outside a file of %d bytes", name, e.DataOffsets, size)
			}
		}
	})
}
