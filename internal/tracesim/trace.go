package tracesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// BlockTokens is the number of prompt tokens behind one hash id in the
// Mooncake traces.
const BlockTokens = 512

// MaxLineBytes bounds one trace line; a longer line is a bad line, so a
// corrupt file cannot make the reader buffer without limit.
const MaxLineBytes = 16 << 20

// ErrBadLine is wrapped by every error about one line of a trace.
var ErrBadLine = errors.New("bad trace line")

// Request is one line of a Mooncake trace.
type Request struct {
	// Timestamp is the arrival time in milliseconds from the trace start.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are prompt and output sizes in tokens.
	InputLength  int64 `json:"input_length"`
	OutputLength int64 `json:"output_length"`
	// HashIDs holds one id per BlockTokens-token prompt block; equal ids
	// mean equal prompt prefixes up to and including that block.
	HashIDs []int64 `json:"hash_ids"`
}

// ReadStats counts what the reader saw. Warnings are not errors: the
// simulations run on such requests as they are.
type ReadStats struct {
	Lines    int // lines read, blank ones included
	Blank    int // blank lines skipped
	Requests int // requests returned
	// LengthMismatch counts requests with len(hash_ids) != ceil(input_length/512).
	LengthMismatch int
	// OutOfOrder counts requests whose timestamp is below the previous one's.
	OutOfOrder int
}

// Warnings is the number of requests that drew a warning.
func (s ReadStats) Warnings() int { return s.LengthMismatch + s.OutOfOrder }

// Reader decodes a JSONL trace one request at a time.
type Reader struct {
	br     *bufio.Reader
	stats  ReadStats
	lastTS int64
	err    error
}

// NewReader returns a Reader over r. It does no buffering beyond one line.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), lastTS: -1}
}

// Stats returns the counts so far.
func (r *Reader) Stats() ReadStats { return r.stats }

// wireRequest has pointer fields so that a missing field is told apart
// from a zero one.
type wireRequest struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// readLine returns the next line without its line ending.
func (r *Reader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLineBytes {
			return nil, fmt.Errorf("%w: line %d: longer than %d bytes", ErrBadLine, r.stats.Lines+1, MaxLineBytes)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && (err != io.EOF || len(line) == 0) {
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

// Next returns the next request, io.EOF after the last one, or an error
// wrapping ErrBadLine that names the line number. After an error every
// later call returns the same error.
func (r *Reader) Next() (Request, error) {
	for r.err == nil {
		line, err := r.readLine()
		if err != nil {
			r.err = err
			break
		}
		r.stats.Lines++
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			r.stats.Blank++
			continue
		}
		req, err := parseLine(line)
		if err != nil {
			r.err = fmt.Errorf("%w: line %d: %w", ErrBadLine, r.stats.Lines, err)
			break
		}
		r.stats.Requests++
		if int64(len(req.HashIDs)) != ceilDiv(req.InputLength, BlockTokens) {
			r.stats.LengthMismatch++
		}
		if req.Timestamp < r.lastTS {
			r.stats.OutOfOrder++
		}
		r.lastTS = req.Timestamp
		return req, nil
	}
	return Request{}, r.err
}

func parseLine(line []byte) (Request, error) {
	if line[0] != '{' {
		return Request{}, errors.New("not a JSON object")
	}
	var w wireRequest
	if err := json.Unmarshal(line, &w); err != nil {
		return Request{}, err
	}
	switch {
	case w.Timestamp == nil:
		return Request{}, errors.New(`missing "timestamp"`)
	case w.InputLength == nil:
		return Request{}, errors.New(`missing "input_length"`)
	case w.OutputLength == nil:
		return Request{}, errors.New(`missing "output_length"`)
	case w.HashIDs == nil:
		return Request{}, errors.New(`missing "hash_ids"`)
	case *w.Timestamp < 0:
		return Request{}, fmt.Errorf("negative timestamp %d", *w.Timestamp)
	case *w.InputLength < 0:
		return Request{}, fmt.Errorf("negative input_length %d", *w.InputLength)
	case *w.OutputLength < 0:
		return Request{}, fmt.Errorf("negative output_length %d", *w.OutputLength)
	}
	return Request{Timestamp: *w.Timestamp, InputLength: *w.InputLength, OutputLength: *w.OutputLength, HashIDs: *w.HashIDs}, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Trace is a whole decoded trace.
type Trace struct {
	Requests []Request
	Stats    ReadStats
}

// ReadAll decodes r up to limit requests (limit <= 0: all of them).
func ReadAll(r io.Reader, limit int) (Trace, error) {
	tr := NewReader(r)
	var reqs []Request
	for limit <= 0 || len(reqs) < limit {
		req, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Trace{Stats: tr.Stats()}, err
		}
		reqs = append(reqs, req)
	}
	return Trace{Requests: reqs, Stats: tr.Stats()}, nil
}

// Ordered returns the requests in timestamp order; requests with equal
// timestamps keep their order in the trace. The input is not modified.
func Ordered(reqs []Request) []Request {
	out := slices.Clone(reqs)
	slices.SortStableFunc(out, func(a, b Request) int {
		switch {
		case a.Timestamp < b.Timestamp:
			return -1
		case a.Timestamp > b.Timestamp:
			return 1
		}
		return 0
	})
	return out
}
