# frozen_string_literal: true

# The peer of scripts/bench's `peer_sidekiq` row: receipt validation as a Rails team would write it
# as a plain Sidekiq job, with Debian's ruby-sidekiq (6.4) and ruby-pg. Same work as a receiptq
# worker's validation: POST the receipt to verifyReceipt (the same mock App Store, keep-alive
# connection per Sidekiq thread), parse the answer, then one transaction that upserts the receipt
# and its purchases (prepared statements, synchronous_commit on). Failures raise, so Sidekiq
# retries them with its own backoff.
#
#   PEER_VERIFY_URL=http://127.0.0.1:PORT/verifyReceipt PEER_DATABASE_URL=postgres://… \
#   REDIS_URL=redis://127.0.0.1:16379/3 sidekiq -r ./bench/peer/validate_receipt_job.rb -c 100 -q peer

require "connection_pool"
require "json"
require "net/http"
require "pg"
require "sidekiq"

module Peer
  VERIFY_URL = URI(ENV.fetch("PEER_VERIFY_URL"))
  SHARED_SECRET = ENV["PEER_SHARED_SECRET"]

  STATEMENTS = {
    "upsert_receipt" => <<~SQL,
      INSERT INTO peer_receipts (id, app_id, status, environment, receipt_data, validated_at)
      VALUES ($1, $2, $3, $4, $5, now())
      ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, environment = EXCLUDED.environment,
        validated_at = EXCLUDED.validated_at
    SQL
    "upsert_purchase" => <<~SQL
      INSERT INTO peer_purchases (environment, transaction_id, original_transaction_id, receipt_id, product_id,
        purchase_date, expires_date)
      VALUES ($1, $2, $3, $4, $5, to_timestamp($6::bigint / 1000.0), to_timestamp($7::bigint / 1000.0))
      ON CONFLICT (environment, transaction_id) DO UPDATE SET expires_date = EXCLUDED.expires_date,
        receipt_id = EXCLUDED.receipt_id
    SQL
  }.freeze

  # One connection per Sidekiq thread at most, made on first use, statements prepared once.
  DB = ConnectionPool.new(size: Integer(ENV.fetch("PEER_DB_POOL", "10")), timeout: 30) do
    connection = PG.connect(ENV.fetch("PEER_DATABASE_URL"))
    connection.exec("SET synchronous_commit = on")
    STATEMENTS.each { |name, sql| connection.prepare(name, sql) }
    connection
  end

  def self.http
    client = Thread.current[:peer_http]
    return client if client&.started?

    client = Net::HTTP.new(VERIFY_URL.host, VERIFY_URL.port)
    client.use_ssl = VERIFY_URL.scheme == "https"
    client.open_timeout = 5
    client.read_timeout = 30
    client.keep_alive_timeout = 30
    client.start
    Thread.current[:peer_http] = client
  end
end

class ValidateReceiptJob
  include Sidekiq::Job
  sidekiq_options queue: "peer", retry: 25

  def perform(receipt_id, app_id, receipt_data)
    body = JSON.generate("receipt-data" => receipt_data, "password" => Peer::SHARED_SECRET)
    response = Peer.http.post(Peer::VERIFY_URL.path, body, "Content-Type" => "application/json")
    raise "verifyReceipt answered HTTP #{response.code}" unless response.is_a?(Net::HTTPSuccess)

    answer = JSON.parse(response.body)
    status = answer.fetch("status")
    # Every bench receipt is a production one Apple accepts; anything else is retried, like an outage.
    raise "verifyReceipt status #{status}" unless status.zero?

    environment = answer["environment"].to_s.downcase
    purchases = answer.dig("receipt", "in_app") || []
    Peer::DB.with do |db|
      db.transaction do
        db.exec_prepared("upsert_receipt", [receipt_id, app_id, status, environment, receipt_data])
        purchases.each do |purchase|
          db.exec_prepared("upsert_purchase", [
            environment, purchase["transaction_id"], purchase["original_transaction_id"], receipt_id,
            purchase["product_id"], purchase["purchase_date_ms"], purchase["expires_date_ms"]
          ])
        end
      end
    end
  end
end
