// Package httpjson is the one place the project's HTTP handlers write JSON
// bodies and error objects (the engine's OpenAI API, the proxy, the master's
// admin API, the bootstrap and metadata servers).
//
// Error writes the OpenAI error shape every OpenAI client understands:
//
//	{"error": {"message": "...", "type": "...", "param": null, "code": 400}}
//
// "param" names the request field at fault when the error was marked with
// Param (ErrorOf reads it), and is null otherwise: every error the project
// writes has the same four keys, whichever component answers.
package httpjson

import (
	"encoding/json"
	"errors"
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

// ParamError is an error caused by one request parameter (made by Param).
type ParamError struct {
	Param string // the JSON field name, as the client sent it ("temperature")
	Err   error
}

func (e *ParamError) Error() string { return e.Err.Error() }
func (e *ParamError) Unwrap() error { return e.Err }

// Param marks err as caused by the request field param; errors.Is and
// errors.As still see err.
func Param(param string, err error) error { return &ParamError{Param: param, Err: err} }

// ErrorOf writes err as an OpenAI-style error object, with "param" set to
// the field a ParamError in err's chain names, and returns the status.
func ErrorOf(w http.ResponseWriter, code int, typ string, err error) int {
	body := ErrorBody{Message: err.Error(), Type: typ, Code: code}
	if pe, ok := errors.AsType[*ParamError](err); ok {
		body.Param = pe.Param
	}
	return Write(w, code, ErrorResponse{Error: body})
}
