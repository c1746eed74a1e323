package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Body is a client's JSON request object, numbers kept exact
// (json.Number). It is the one open type at the proxy's HTTP edge: any
// OpenAI or engine-specific field passes through to the engines unchanged,
// so it stays a map. The proxy reads only the prompt (prompt.go) and adds
// its own typed fields per protocol (protocol.go).
type Body map[string]any

// with is a copy of b with room for extra more fields.
func (b Body) with(extra int) Body {
	c := make(Body, len(b)+extra)
	for k, v := range b {
		c[k] = v
	}
	return c
}

// decodeObject parses a JSON object, keeping numbers exact.
func decodeObject(raw []byte) (Body, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m Body
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	if m == nil {
		return nil, errors.New("request body is not a JSON object")
	}
	if d.More() {
		return nil, errors.New("request body has trailing data after the JSON object")
	}
	return m, nil
}
