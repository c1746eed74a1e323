package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/tenant"
	"github.com/kvcache-go/mooncake/internal/tlsconf"
)

// securityArgs are a setup's tenant, credential, TLS and grant key
// (mc_store_open_ex's options "tenant_id", "token", "tls" and
// "grant_key_file"). tenant_id is Mooncake's: the tenant the client names
// ("" or "default": none), which a master with tenants admits without a
// token when its policy lets it; with a token it must be the token's tenant
// (docs/security.md, "Tenants named by id"). grant_key_file is the
// master's data-path grant key file (`mooncake master --grant-key-file`):
// with it the client's segments mount on a master with grants, and its
// transfer engine refuses incoming READs and WRITEs no grant covers, as a
// storage node's does. Empty fields come from the environment:
// MOONCAKE_TENANT_ID, MOONCAKE_TENANT_TOKEN, MOONCAKE_TLS_CA,
// MOONCAKE_TLS_CERT, MOONCAKE_TLS_KEY, MOONCAKE_TLS_SERVER_NAME,
// MOONCAKE_GRANT_KEY_FILE.
type securityArgs struct {
	TenantID string `json:"tenant_id"`
	Token    string `json:"token"`
	TLS      struct {
		CA         string `json:"ca"`
		Cert       string `json:"cert"`
		Key        string `json:"key"`
		ServerName string `json:"server_name"`
	} `json:"tls"`
	GrantKeyFile string `json:"grant_key_file"`
}

// storeSecurity is what a store client of the binding sends: the tenant it
// names, its tenant token and its TLS configuration (nil: plaintext), and
// the verifier of data-path grants built from the grant key (nil: no key).
type storeSecurity struct {
	tenantID string
	token    string
	tls      *tls.Config
	grants   *grant.Verifier
}

func or(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// resolve fills the empty fields from the environment, checks the tenant's
// name and loads the TLS and grant key files.
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
	v, err := loadGrantKey(or(a.GrantKeyFile, "MOONCAKE_GRANT_KEY_FILE"))
	if err != nil {
		return storeSecurity{}, err
	}
	return storeSecurity{tenantID: id, token: or(a.Token, "MOONCAKE_TENANT_TOKEN"), tls: c, grants: v}, nil
}

// loadGrantKey reads the grant key file at path ("": none, nil) into a
// verifier; an unreadable or malformed file is INVALID_PARAMS.
func loadGrantKey(path string) (*grant.Verifier, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errInvalid("setup: grant_key_file: " + err.Error())
	}
	k, err := grant.ParseKeys(b)
	if err != nil {
		return nil, errInvalid("setup: grant_key_file " + path + ": " + err.Error())
	}
	return grant.NewVerifier(k, nil), nil
}

// mountProof is the store.Config.MountProof of a client with the grant key
// (as a storage node signs it); nil without one.
func (s storeSecurity) mountProof() func(clientID, endpoint string, base, size uint64) ([]byte, error) {
	if s.grants == nil {
		return nil
	}
	keys := s.grants.Keys()
	return func(clientID, endpoint string, base, size uint64) ([]byte, error) {
		return keys.MountProof(clientID, endpoint, base, size, time.Now())
	}
}

// mountHint adds to a mount the master refused for want of a proof of
// mount (a master with grants, a client without the key) how to give the
// binding the key. The master's refusal arrives as its message only, so it
// is recognised by grant.ErrMountProof's text.
func (s storeSecurity) mountHint(err error) error {
	if err == nil || s.grants != nil || !strings.Contains(err.Error(), grant.ErrMountProof.Error()) {
		return err
	}
	return fmt.Errorf("%w; for this client set MOONCAKE_GRANT_KEY_FILE (or the grant_key_file option) to the master's grant key file", err)
}
