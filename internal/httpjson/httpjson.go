// Package httpjson is the one place the project's HTTP handlers write JSON
// bodies and error objects (the engine's OpenAI API, the proxy, the master's
// admin API, the bootstrap and metadata servers).
//
// Error writes the OpenAI error shape every OpenAI client understands:
//
//	{"error": {"message": "...", "type": "...", "code": 400}}
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write sends v as a JSON body with the given status and returns the status
// (handy for handlers that record it in metrics). An encoding error after the
// header is written can only be a broken connection, which the client sees.
func Write(w http.ResponseWriter, code int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
	return code
}

// ErrorBody is the OpenAI error object.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    int    `json:"code"`
}

// ErrorResponse wraps ErrorBody as {"error": {...}}.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// Error writes an OpenAI-style error object and returns the status.
func Error(w http.ResponseWriter, code int, typ, msg string) int {
	return Write(w, code, ErrorResponse{Error: ErrorBody{Message: msg, Type: typ, Code: code}})
}
