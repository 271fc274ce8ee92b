package testsvc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// LegacyTenantCreds are credentials as a version before tenant accounts
// issued them to tenant name: a user of the shared PADDOCK account, with
// the tenant's tags ("paddock-role:tenant", "paddock-tenant:<name>") and
// perms, signed with the account key saved in authDir (account.nk). The
// tests of the migration and of the account wall's control use them.
func LegacyTenantCreds(tb testing.TB, authDir, name string, perms jwt.Permissions) []byte {
	tb.Helper()
	seed, err := os.ReadFile(filepath.Join(authDir, "account.nk"))
	must(tb, err)
	acc, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	must(tb, err)
	user, err := nkeys.CreateUser()
	must(tb, err)
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "tenant:" + name
	uc.Tags.Add("paddock-role:tenant", "paddock-tenant:"+name)
	uc.Permissions = perms
	token, err := uc.Encode(acc)
	must(tb, err)
	userSeed, err := user.Seed()
	must(tb, err)
	creds, err := jwt.FormatUserConfig(token, userSeed)
	must(tb, err)
	return creds
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
