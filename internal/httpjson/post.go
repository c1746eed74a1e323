package httpjson

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Post sends body (JSON) to url within timeout and returns the answer's
// body, at most limit bytes. A status other than 200 is an error that
// names what (the service asked) and carries the answer's text.
func Post(ctx context.Context, client *http.Client, url string, body []byte, timeout time.Duration, limit int64, what string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", what, resp.Status, bytes.TrimSpace(raw))
	}
	return raw, nil
}
