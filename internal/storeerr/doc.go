// Package storeerr holds the conditions of the store master that callers
// branch on (ErrObjectNotFound, ErrNoSpace, ...) and the one table that maps
// them to Mooncake's numeric error codes (Code) and back (ErrorOf).
//
// It is a leaf shared by both ends of the master RPC: the master core
// (internal/master) returns these sentinels wrapped with context and its gRPC
// shell puts Code(err) in each response's status; the store client (package
// store) turns a status back into the sentinel with ErrorOf, so that
// errors.Is works across the wire. Keeping the table here, rather than in
// the master, is what lets the store client link without the master.
package storeerr
