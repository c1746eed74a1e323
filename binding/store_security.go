package main

import (
	"crypto/tls"
	"os"

	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
)

// securityArgs are a setup's tenant, credential and TLS (mc_store_open_ex's
// options "tenant_id", "token" and "tls"). tenant_id is Mooncake's: the
// tenant the client names ("" or "default": none), which a master with
// tenants admits without a token when its policy lets it; with a token it
// must be the token's tenant (docs/security.md, "Tenants named by id").
// Empty fields come from the environment: MOONCAKE_TENANT_ID,
// MOONCAKE_TENANT_TOKEN, MOONCAKE_TLS_CA, MOONCAKE_TLS_CERT,
// MOONCAKE_TLS_KEY, MOONCAKE_TLS_SERVER_NAME.
type securityArgs struct {
	TenantID string `json:"tenant_id"`
	Token    string `json:"token"`
	TLS      struct {
		CA         string `json:"ca"`
		Cert       string `json:"cert"`
		Key        string `json:"key"`
		ServerName string `json:"server_name"`
	} `json:"tls"`
}

// storeSecurity is what a store client of the binding sends: the tenant it
// names, its tenant token and its TLS configuration (nil: plaintext).
type storeSecurity struct {
	tenantID string
	token    string
	tls      *tls.Config
}

func or(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// resolve fills the empty fields from the environment, checks the tenant's
// name and loads the TLS files.
func (a securityArgs) resolve() (storeSecurity, error) {
	id := or(a.TenantID, "MOONCAKE_TENANT_ID")
	if id != "" {
		if err := tenant.CheckName(id); err != nil {
			return storeSecurity{}, errInvalid("setup: tenant_id: " + err.Error())
		}
	}
	c, err := tlsconf.Client(tlsconf.Files{CA: or(a.TLS.CA, "MOONCAKE_TLS_CA"), Cert: or(a.TLS.Cert, "MOONCAKE_TLS_CERT"),
		Key: or(a.TLS.Key, "MOONCAKE_TLS_KEY"), ServerName: or(a.TLS.ServerName, "MOONCAKE_TLS_SERVER_NAME")})
	if err != nil {
		return storeSecurity{}, errInvalid("setup: " + err.Error())
	}
	return storeSecurity{tenantID: id, token: or(a.Token, "MOONCAKE_TENANT_TOKEN"), tls: c}, nil
}
