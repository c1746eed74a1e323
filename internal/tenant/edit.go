package tenant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"sigs.k8s.io/yaml"
)

// Editing a policy where it is kept (the admin API's PUT and DELETE of a
// tenant's quota, Mooncake's): SetQuota and RemoveTenant rewrite a
// policy's bytes, Source.Edit reads the policy afresh, applies one of
// them, saves the result through the Source's Saver and puts it in force.
// A rewritten policy is YAML with the same fields and values (tokens,
// certificate names and expiries included); comments and layout are not
// kept.

// Saver writes a policy's bytes where the Source's Loader reads them; it
// must return by ctx's deadline.
type Saver func(ctx context.Context, policy []byte) error

// ErrReadOnly: the Source has no Saver.
var ErrReadOnly = errors.New("tenant: the policy cannot be changed from here")

// ErrNoTenant: the policy does not list the tenant.
var ErrNoTenant = errors.New("tenant: not in the policy")

// MaxQuota is the largest byte quota (Mooncake's: 2^63-1).
const MaxQuota = 1<<63 - 1

// SetQuota returns policy with tenant name's byte quota set to quota,
// adding the tenant (a name and a quota) when the policy does not list
// it.
func SetQuota(policy []byte, name string, quota uint64) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if quota == 0 || quota > MaxQuota {
		return nil, fmt.Errorf("%w: quota %d, want 1 to 2^63-1 bytes", ErrPolicy, quota)
	}
	return edit(policy, func(tenants []any) ([]any, error) {
		q := json.Number(strconv.FormatUint(quota, 10))
		for _, t := range tenants {
			if m, ok := t.(map[string]any); ok && m["name"] == name {
				m["quota"] = q
				return tenants, nil
			}
		}
		return append(tenants, map[string]any{"name": name, "quota": q}), nil
	})
}

// RemoveTenant returns policy without tenant name (ErrNoTenant when it
// does not list it).
func RemoveTenant(policy []byte, name string) ([]byte, error) {
	out, _, err := TakeTenant(policy, name)
	return out, err
}

// TakeTenant is RemoveTenant that also returns the tenant's entry, as
// RestoreTenant puts it back.
func TakeTenant(policy []byte, name string) (out, entry []byte, err error) {
	out, err = edit(policy, func(tenants []any) ([]any, error) {
		for i, t := range tenants {
			if m, ok := t.(map[string]any); ok && m["name"] == name {
				if entry, err = json.Marshal(m); err != nil {
					return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
				}
				return append(tenants[:i:i], tenants[i+1:]...), nil
			}
		}
		return nil, fmt.Errorf("%w: %q", ErrNoTenant, name)
	})
	return out, entry, err
}

// RestoreTenant returns policy with a tenant's entry (from TakeTenant)
// listed again, replacing any entry of the same name added since.
func RestoreTenant(policy, entry []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(entry))
	d.UseNumber()
	var e map[string]any
	if err := d.Decode(&e); err != nil {
		return nil, fmt.Errorf("%w: tenant entry: %v", ErrPolicy, err)
	}
	return edit(policy, func(tenants []any) ([]any, error) {
		for i, t := range tenants {
			if m, ok := t.(map[string]any); ok && m["name"] == e["name"] {
				tenants[i] = e
				return tenants, nil
			}
		}
		return append(tenants, e), nil
	})
}

// edit applies change to the tenants of policy, and checks that the
// result parses. Numbers stay exact (json.Number).
func edit(policy []byte, change func([]any) ([]any, error)) ([]byte, error) {
	if _, err := Parse(policy); err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(policy)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	tenants, _ := doc["tenants"].([]any)
	if tenants, err = change(tenants); err != nil {
		return nil, err
	}
	if tenants == nil {
		tenants = []any{}
	}
	doc["tenants"] = tenants
	js, err = json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	out, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	if _, err := Parse(out); err != nil {
		return nil, err
	}
	return out, nil
}

// FileSaver writes the policy file at path whole or not at all: a
// temporary file beside it, synced, renamed over it, the directory
// synced. The file keeps its permissions (0600 for a new one).
func FileSaver(path string) Saver {
	return func(ctx context.Context, policy []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if st, err := os.Stat(path); err == nil {
			mode = st.Mode().Perm()
		}
		dir := filepath.Dir(path)
		f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
		if err != nil {
			return err
		}
		tmp := f.Name()
		_, err = f.Write(policy)
		if err == nil {
			err = f.Chmod(mode)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("write %s: %w", path, err)
		}
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync()
			_ = d.Close()
		}
		return nil
	}
}
