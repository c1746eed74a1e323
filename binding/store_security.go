package main

import (
	"crypto/tls"
	"os"

	"github.com/kvcache-go/mooncake/internal/tlsconf"
)

// securityArgs are a setup's credential and TLS (mc_store_open_ex's
// options "token" and "tls"; not Mooncake settings: Mooncake's tenant_id
// is not a credential). Empty fields come from the environment:
// MOONCAKE_TENANT_TOKEN, MOONCAKE_TLS_CA, MOONCAKE_TLS_CERT,
// MOONCAKE_TLS_KEY, MOONCAKE_TLS_SERVER_NAME.
type securityArgs struct {
	Token string `json:"token"`
	TLS   struct {
		CA         string `json:"ca"`
		Cert       string `json:"cert"`
		Key        string `json:"key"`
		ServerName string `json:"server_name"`
	} `json:"tls"`
}

// storeSecurity is what a store client of the binding sends: its tenant
// token and its TLS configuration (nil: plaintext).
type storeSecurity struct {
	token string
	tls   *tls.Config
}

func or(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// resolve fills the empty fields from the environment and loads the TLS
// files.
func (a securityArgs) resolve() (storeSecurity, error) {
	c, err := tlsconf.Client(tlsconf.Files{CA: or(a.TLS.CA, "MOONCAKE_TLS_CA"), Cert: or(a.TLS.Cert, "MOONCAKE_TLS_CERT"),
		Key: or(a.TLS.Key, "MOONCAKE_TLS_KEY"), ServerName: or(a.TLS.ServerName, "MOONCAKE_TLS_SERVER_NAME")})
	if err != nil {
		return storeSecurity{}, errInvalid("setup: " + err.Error())
	}
	return storeSecurity{token: or(a.Token, "MOONCAKE_TENANT_TOKEN"), tls: c}, nil
}
