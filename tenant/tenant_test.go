package tenant_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

var someUser = func() string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}()

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := tenant.Tenant{Name: "dev", MaxQueued: 100, MaxRunning: 4, Rate: 10, User: someUser}
	for name, tc := range map[string]struct {
		edit  func(*tenant.Tenant)
		field string // "" = valid
		rule  string
	}{
		"valid":       {edit: func(*tenant.Tenant) {}},
		"zero quotas": {edit: func(t *tenant.Tenant) { t.MaxQueued, t.MaxRunning, t.Rate, t.User = 0, 0, 0, "" }},
		"largest quotas": {edit: func(t *tenant.Tenant) {
			t.MaxQueued, t.MaxRunning, t.Rate = tenant.MaxMaxQueued, tenant.MaxMaxRunning, tenant.MaxRate
		}},
		"empty name":          {edit: func(t *tenant.Tenant) { t.Name = "" }, field: "name", rule: "1 to 32"},
		"upper case name":     {edit: func(t *tenant.Tenant) { t.Name = "Dev" }, field: "name", rule: "[a-z0-9-]"},
		"dotted name":         {edit: func(t *tenant.Tenant) { t.Name = "a.b" }, field: "name", rule: "[a-z0-9-]"},
		"long name":           {edit: func(t *tenant.Tenant) { t.Name = strings.Repeat("a", 33) }, field: "name", rule: "1 to 32"},
		"negative max queued": {edit: func(t *tenant.Tenant) { t.MaxQueued = -1 }, field: "max_queued", rule: "0 (unlimited) to 1000000000"},
		"huge max queued":     {edit: func(t *tenant.Tenant) { t.MaxQueued = tenant.MaxMaxQueued + 1 }, field: "max_queued", rule: "0 (unlimited)"},
		"negative running":    {edit: func(t *tenant.Tenant) { t.MaxRunning = -3 }, field: "max_running", rule: "0 (the fleet default) to 100000"},
		"negative rate":       {edit: func(t *tenant.Tenant) { t.Rate = -1 }, field: "rate", rule: "jobs per second"},
		"huge rate":           {edit: func(t *tenant.Tenant) { t.Rate = tenant.MaxRate + 1 }, field: "rate", rule: "0 (unlimited) to 1000000"},
		"negative stored":     {edit: func(t *tenant.Tenant) { t.MaxStored = -1 }, field: "max_stored", rule: "0 (the fleet default) to"},
		"huge stored":         {edit: func(t *tenant.Tenant) { t.MaxStored = tenant.MaxMaxStored + 1 }, field: "max_stored", rule: "bytes"},
		"account key as user": {edit: func(t *tenant.Tenant) { t.User = "A" + someUser[1:] }, field: "user", rule: "public nkey"},
	} {
		tn := ok
		tc.edit(&tn)
		err := tn.Validate()
		if tc.field == "" {
			assert.NoError(t, err, name)
			continue
		}
		require.ErrorIs(t, err, tenant.ErrInvalid, name)
		var verr *tenant.ValidationError
		require.ErrorAs(t, err, &verr, name)
		assert.Equal(t, tc.field, verr.Field, name)
		assert.Contains(t, err.Error(), tc.rule, name)
		if tc.field == "name" {
			assert.ErrorIs(t, err, job.ErrInvalidTenant, name)
		}
	}
}

func TestValidateReportsEveryField(t *testing.T) {
	t.Parallel()
	err := (&tenant.Tenant{Name: "X", MaxQueued: -1, Rate: -1}).Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var verr *tenant.ValidationError
		require.True(t, errors.As(e, &verr))
		fields = append(fields, verr.Field)
	}
	assert.Equal(t, []string{"name", "max_queued", "rate"}, fields)
}

func TestTenantJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := json.Marshal(tenant.Tenant{Name: "dev", MaxQueued: 5, MaxRunning: 2, Rate: 1, CreatedAt: at, User: someUser})
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"dev","max_queued":5,"max_running":2,"rate":1,"created_at":"2026-01-02T03:04:05Z","user":"`+someUser+`"}`, string(b))
}
