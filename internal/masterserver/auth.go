package masterserver

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/kvcache-go/mooncake/internal/storepb"
)

// NeedsSecret reports whether the master RPC fullMethod changes the pool
// for everyone (remove everything, remove by pattern, unmount a segment)
// and so needs the cluster secret when the master has one
// (ServerConfig.Secret). Every other call, reads included, stays open.
func NeedsSecret(fullMethod string) bool {
	switch fullMethod {
	case pb.MasterService_RemoveAll_FullMethodName,
		pb.MasterService_RemoveByRegex_FullMethodName,
		pb.MasterService_UnmountSegment_FullMethodName:
		return true
	}
	return false
}

// BearerOK reports whether an Authorization header value carries secret
// ("Bearer <secret>"), comparing in constant time.
func BearerOK(authorization, secret string) bool {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(token), []byte(secret)) == 1
}

// secretInterceptor refuses the calls NeedsSecret names with
// codes.Unauthenticated unless their "authorization" metadata is
// "Bearer <secret>". An empty secret lets every call through.
func secretInterceptor(secret string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if secret == "" || !NeedsSecret(info.FullMethod) {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if BearerOK(v, secret) {
				return handler(ctx, req)
			}
		}
		name := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		return nil, grpcstatus.Errorf(codes.Unauthenticated, "master: %s needs the cluster secret (--secret or MOONCAKE_SECRET), missing or wrong", name)
	}
}
