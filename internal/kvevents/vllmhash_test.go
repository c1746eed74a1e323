package kvevents

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// vllmVectors are block hashes computed by vLLM's own hashing functions
// (scripts/vllm-block-hash-vectors.py; the file names its source).
type vllmVectors struct {
	Provenance string `json:"provenance"`
	Tokens     []int  `json:"tokens"`
	Cases      []struct {
		Algo           VLLMHashAlgo `json:"algo"`
		PythonHashSeed string       `json:"python_hash_seed"`
		BlockSize      int          `json:"block_size"`
		Name           string       `json:"name"`
		LoraName       string       `json:"lora_name"`
		CacheSalt      string       `json:"cache_salt"`
		MM             []MMFeature  `json:"mm"`
		NoneHash       string       `json:"none_hash"`
		ExtraKeys      []any        `json:"extra_keys"`
		BlockHashes    []string     `json:"block_hashes"`
		IntHashes      []string     `json:"int_hashes"`
	} `json:"cases"`
}

func TestVLLMBlockHashesMatchVLLM(t *testing.T) {
	b, err := os.ReadFile("testdata/vllm_block_hashes.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vllmVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) < 80 {
		t.Fatalf("%d cases", len(v.Cases))
	}
	for _, c := range v.Cases {
		name := string(c.Algo) + "/" + c.PythonHashSeed + "/" + strconv.Itoa(c.BlockSize) + "/" + c.Name
		h, err := NewVLLMHasher(c.Algo, c.PythonHashSeed)
		if err != nil {
			t.Fatal(name, err)
		}
		if got := hex.EncodeToString(h.NoneHash); got != c.NoneHash {
			t.Fatalf("%s: NONE_HASH %s, vLLM %s", name, got, c.NoneHash)
		}
		req := VLLMRequest{LoraName: c.LoraName, CacheSalt: c.CacheSalt, MM: c.MM}
		// the extra keys, as JSON, against vLLM's
		extra := VLLMExtraKeys(req, c.BlockSize, len(c.BlockHashes))
		for i := range extra {
			var mine any
			if extra[i] != nil {
				l := make([]any, len(extra[i]))
				for j, k := range extra[i] {
					if m, ok := k.(MMKey); ok {
						l[j] = []any{m.Identifier, float64(m.Offset)}
					} else {
						l[j] = k
					}
				}
				mine = l
			}
			a, _ := json.Marshal(mine)
			e, _ := json.Marshal(c.ExtraKeys[i])
			if string(a) != string(e) {
				t.Fatalf("%s block %d: extra keys %s, vLLM %s", name, i, a, e)
			}
		}
		hs, err := h.Request(req, v.Tokens, c.BlockSize)
		if err != nil {
			t.Fatal(name, err)
		}
		if len(hs) != len(c.BlockHashes) {
			t.Fatalf("%s: %d blocks, vLLM %d", name, len(hs), len(c.BlockHashes))
		}
		for i := range hs {
			if got := hex.EncodeToString(hs[i]); got != c.BlockHashes[i] {
				t.Fatalf("%s block %d: %s, vLLM %s", name, i, got, c.BlockHashes[i])
			}
			if got := strconv.FormatUint(VLLMIntHash(hs[i]), 10); got != c.IntHashes[i] {
				t.Fatalf("%s block %d: int %s, vLLM %s", name, i, got, c.IntHashes[i])
			}
		}
	}
}

// The pickler against CPython's for values beyond the vectors' (long
// tokens, negative and huge ints, long strings, big tuples that need
// several frames), when Debian's python3 is here.
func TestPicklerMatchesCPython(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3")
	}
	ints := []int{0, 1, 255, 256, 65535, 65536, -1, -128, -129, -32768, 1<<31 - 1, 1 << 31, -1 << 31, -1<<31 - 1,
		1 << 40, -1 << 40, 1<<63 - 1, -1 << 63, -1 << 47, 1 << 47, -(1 << 55), 0x7f << 56}
	big := make([]int, 30000)
	for i := range big {
		big[i] = i * 977
	}
	long := string(make([]byte, 300))
	values := []any{
		vllmTuple{parent: []byte("p"), tokens: ints, extra: []any{"lora", MMKey{"img", -3}, "salt"}},
		vllmTuple{parent: make([]byte, 300), tokens: big, extra: nil},
		vllmTuple{parent: []byte{}, tokens: nil, extra: []any{long, []byte("emb")}},
		"1337",
	}
	script := `import pickle,sys,json
for v in json.load(sys.stdin):
    def conv(x):
        if isinstance(x, dict): return bytes.fromhex(x["b"])
        if isinstance(x, list): return tuple(conv(e) for e in x)
        return x
    print(pickle.dumps(conv(v), protocol=5).hex())`
	var in []any
	for _, v := range values {
		in = append(in, jsonPy(v))
	}
	j, _ := json.Marshal(in)
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = bytes.NewReader(j)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, v := range values {
		p := &pickler{}
		if err := p.dump(v); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(p.out); got != lines[i] {
			t.Fatalf("value %d: pickle\n%s\nCPython\n%s", i, got, lines[i])
		}
	}
}

// jsonPy writes a value for the script: tuples as lists, bytes as {"b": hex}.
func jsonPy(v any) any {
	switch v := v.(type) {
	case vllmTuple:
		ts := make([]any, len(v.tokens))
		for i, t := range v.tokens {
			ts[i] = t
		}
		var extra any
		if v.extra != nil {
			extra = jsonPy(v.extra)
		}
		return []any{jsonPy(v.parent), ts, extra}
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonPy(e)
		}
		return out
	case MMKey:
		return []any{v.Identifier, v.Offset}
	case []byte:
		return map[string]string{"b": hex.EncodeToString(v)}
	}
	return v
}

func extraKeysBatch() Batch {
	return Batch{TS: 1, Events: []Event{BlockStored{BlockHashes: []Hash{IntHash(1), IntHash(2)}, TokenIDs: []int{1, 2, 3, 4},
		BlockSize: 2, Medium: MediumGPU, LoraName: "sql",
		ExtraKeys: [][]any{{"sql", MMKey{Identifier: "img", Offset: -3}, "salt", []byte{1, 2}}, nil}}}}
}

// extra_keys as vLLM's msgspec writes them (tuples as arrays) decode to
// the keys VLLMExtraKeys forms, and re-encode the same.
func TestDecodeExtraKeys(t *testing.T) {
	p := mustPack(map[string]any{"ts": 1, "events": []any{map[string]any{"type": "BlockStored",
		"block_hashes": []any{1, 2}, "parent_block_hash": nil, "token_ids": []any{1, 2, 3, 4}, "block_size": 2,
		"lora_id": nil, "medium": "GPU", "lora_name": "sql",
		"extra_keys": []any{[]any{"sql", []any{"img", -3}, "salt", []byte{1, 2}}, nil}}}})
	b, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	want := extraKeysBatch().Events[0].(BlockStored).ExtraKeys
	if got := b.Events[0].(BlockStored).ExtraKeys; !reflect.DeepEqual(got, want) {
		t.Fatalf("extra keys %#v, want %#v", got, want)
	}
	again, err := Encode(extraKeysBatch(), true)
	if err != nil {
		t.Fatal(err)
	}
	b, err = Decode(again)
	if err != nil || !reflect.DeepEqual(b.Events[0].(BlockStored).ExtraKeys, want) {
		t.Fatalf("round trip %#v %v", b, err)
	}
	for _, bad := range []any{"x", []any{nil}, []any{nil, 3}} {
		p := mustPack(map[string]any{"ts": 1, "events": []any{map[string]any{"type": "BlockStored",
			"block_hashes": []any{1, 2}, "block_size": 2, "extra_keys": bad}}})
		if _, err := Decode(p); err == nil {
			t.Errorf("extra_keys %v accepted", bad)
		}
	}
}
