-- Cloud Softphone web service credentials, one set per app. The softphone authenticates with HTTP
-- Digest (or Basic), so the username alone must identify the app: it is unique across apps.
-- Only the RFC 7616 HA1 values are stored (MD5 and SHA-256 of username:realm:password), never the
-- password; the realm they were computed in is kept so a changed realm fails closed.
CREATE TABLE softphone_credentials (
    app_id     uuid PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    username   text NOT NULL UNIQUE,
    realm      text NOT NULL,
    ha1_md5    bytea NOT NULL CHECK (length(ha1_md5) = 16),
    ha1_sha256 bytea NOT NULL CHECK (length(ha1_sha256) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
