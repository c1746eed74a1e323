package tracesim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestReaderGood(t *testing.T) {
	in := "{\"timestamp\": 5, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [0, 1]}\r\n" +
		"\n" +
		"   \n" +
		`{"timestamp": 2, "input_length": 513, "output_length": 0, "hash_ids": [0], "extra": "ignored"}` + "\n" +
		`{"timestamp": 9, "input_length": 0, "output_length": 1, "hash_ids": []}` // no final newline
	tr := NewReader(strings.NewReader(in))
	var got []Request
	for {
		r, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []Request{
		{Timestamp: 5, InputLength: 1024, OutputLength: 3, HashIDs: []int64{0, 1}},
		{Timestamp: 2, InputLength: 513, OutputLength: 0, HashIDs: []int64{0}},
		{Timestamp: 9, InputLength: 0, OutputLength: 1, HashIDs: []int64{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// 513 tokens need 2 blocks, not 1; timestamp 2 follows 5.
	if s := tr.Stats(); s != (ReadStats{Lines: 5, Blank: 2, Requests: 3, LengthMismatch: 1, OutOfOrder: 1}) || s.Warnings() != 2 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("after EOF: %v", err)
	}
}

func TestReaderBadLines(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [7]}` + "\n"
	for _, tc := range []struct{ name, line, want string }{
		{"not json", "hello", "not a JSON object"},
		{"array", "[1,2]", "not a JSON object"},
		{"null", "null", "not a JSON object"},
		{"truncated", `{"timestamp": 0, "input_length"`, "unexpected end"},
		{"trailing", `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]} x`, "invalid character"},
		{"float", `{"timestamp": 1.5, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "timestamp"},
		{"string id", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": ["a"]}`, "hash_ids"},
		{"no ts", `{"input_length": 1, "output_length": 1, "hash_ids": [1]}`, `missing "timestamp"`},
		{"no input", `{"timestamp": 1, "output_length": 1, "hash_ids": [1]}`, `missing "input_length"`},
		{"no output", `{"timestamp": 1, "input_length": 1, "hash_ids": [1]}`, `missing "output_length"`},
		{"no ids", `{"timestamp": 1, "input_length": 1, "output_length": 1}`, `missing "hash_ids"`},
		{"null ids", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": null}`, `missing "hash_ids"`},
		{"neg ts", `{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, "negative timestamp"},
		{"neg input", `{"timestamp": 1, "input_length": -1, "output_length": 1, "hash_ids": []}`, "negative input_length"},
		{"neg output", `{"timestamp": 1, "input_length": 1, "output_length": -1, "hash_ids": [1]}`, "negative output_length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAll(strings.NewReader(good+"\n"+tc.line+"\n"+good), 0)
			if !errors.Is(err, ErrBadLine) || !strings.Contains(err.Error(), "line 3:") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadLine at line 3 containing %q", err, tc.want)
			}
		})
	}
}

func TestReaderLongLine(t *testing.T) {
	long := append([]byte(`{"timestamp": 0, "input_length": 0, "output_length": 0, "hash_ids": []}`), bytes.Repeat([]byte(" "), MaxLineBytes)...)
	_, err := ReadAll(bytes.NewReader(long), 0)
	if !errors.Is(err, ErrBadLine) || !strings.Contains(err.Error(), "line 1: longer than") {
		t.Fatalf("err = %v", err)
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestReaderIOError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := ReadAll(io.MultiReader(strings.NewReader("\n"), failingReader{boom}), 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

func TestReadAllLimit(t *testing.T) {
	var b strings.Builder
	for i := range 10 {
		b.WriteString(`{"timestamp": ` + string(rune('0'+i)) + `, "input_length": 512, "output_length": 1, "hash_ids": [1]}` + "\n")
	}
	b.WriteString("garbage after the limit\n")
	tr, err := ReadAll(strings.NewReader(b.String()), 4)
	if err != nil || len(tr.Requests) != 4 || tr.Requests[3].Timestamp != 3 {
		t.Fatalf("tr %+v err %v", tr, err)
	}
	if _, err := ReadAll(strings.NewReader(b.String()), 0); !errors.Is(err, ErrBadLine) || !strings.Contains(err.Error(), "line 11") {
		t.Fatalf("whole file: %v", err)
	}
}

func TestOrderedStable(t *testing.T) {
	in := []Request{{Timestamp: 3, InputLength: 1}, {Timestamp: 1, InputLength: 2}, {Timestamp: 3, InputLength: 3}, {Timestamp: 1, InputLength: 4}}
	got := Ordered(in)
	var lens []int64
	for _, r := range got {
		lens = append(lens, r.InputLength)
	}
	if !reflect.DeepEqual(lens, []int64{2, 4, 1, 3}) || in[0].Timestamp != 3 {
		t.Fatalf("order %v, input changed: %v", lens, in[0])
	}
}

// FuzzReader: the reader never panics, and whatever it accepts survives a
// re-encode/decode round trip with the same warnings.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`,
		"{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [0]}\n\n{\"timestamp\": 1, \"input_length\": 9999, \"output_length\": 0, \"hash_ids\": [0]}\r\n",
		`{"timestamp": 1}`, "null", "[]", `{"hash_ids": [1e3]}`, "\n\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadAll(bytes.NewReader(data), 0)
		if err != nil {
			if !errors.Is(err, ErrBadLine) {
				t.Fatalf("error not wrapping ErrBadLine: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, r := range tr.Requests {
			if r.Timestamp < 0 || r.InputLength < 0 || r.OutputLength < 0 || r.HashIDs == nil {
				t.Fatalf("accepted %+v", r)
			}
			if err := enc.Encode(r); err != nil {
				t.Fatal(err)
			}
		}
		again, err := ReadAll(&buf, 0)
		if err != nil {
			t.Fatalf("re-read: %v", err)
		}
		if !reflect.DeepEqual(again.Requests, tr.Requests) && len(tr.Requests) > 0 {
			t.Fatalf("round trip: %+v vs %+v", again.Requests, tr.Requests)
		}
		if again.Stats.LengthMismatch != tr.Stats.LengthMismatch || again.Stats.OutOfOrder != tr.Stats.OutOfOrder {
			t.Fatalf("warnings changed: %+v vs %+v", again.Stats, tr.Stats)
		}
	})
}
