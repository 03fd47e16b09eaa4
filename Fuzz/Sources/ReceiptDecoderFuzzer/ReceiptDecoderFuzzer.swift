import CLibFuzzer
import Foundation
import ReceiptCore

/// libFuzzer entry point: every decoder entry point gets the same bytes. Thrown errors are the
/// expected outcome for most inputs; only a crash (trap, ASan report), a hang or runaway memory is
/// a finding. Build with `-sanitize=fuzzer,address -parse-as-library` (see scripts/fuzz).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))

    // Either style, dispatched on the first byte (DER SEQUENCE or `{`).
    _ = try? ReceiptDecoder.decode(bytes: bytes)
    // The bytes as text: invalid UTF-8 becomes U+FFFD, which the base64 reader must refuse cleanly.
    _ = try? ReceiptDecoder.decode(base64: String(decoding: bytes, as: UTF8.self))
    // Each stage on its own, so a payload or plist is reached without a valid envelope first.
    _ = try? ReceiptDecoder.signedContent(ofPKCS7: bytes)
    _ = try? ReceiptDecoder.decodePayload(bytes)
    _ = try? TransactionReceiptCodec.decode(bytes)

    // StoreKit 2: the compact JWS reader (header, x5c, signature shape), Base64URL, and Apple's
    // payload models, each reached on its own so the JSON layer is fuzzed without a valid envelope.
    let text = String(decoding: bytes, as: UTF8.self)
    if let jws = try? CompactJWS(text), let payload = try? JSONDecoder().decode(JSONValue.self, from: Data(jws.payload)) {
        fuzzPayload(payload)
    }
    _ = CompactJWS.looksLikeJWS(text)
    if let decoded = Base64URL.decode(text) {
        // Oracle: what decodes re-encodes to text that decodes to the same bytes.
        precondition(Base64URL.decode(Base64URL.encode(decoded)) == decoded, "Base64URL does not round-trip")
    }
    if let payload = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) { fuzzPayload(payload) }
    // Oracle: whatever the one-pass reader accepts, JSONDecoder reads the same (it may refuse more:
    // duplicate keys, lone surrogates, numbers beyond Double).
    if let parsed = try? JSONValue.parse(bytes) {
        precondition(
            (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))) == parsed, "JSONValue.parse disagrees with JSONDecoder")
    }

    // Oracle: the workers' direct envelope reader takes nothing JSONDecoder refuses and reads what
    // it takes to the same envelope.
    if let direct = JobEnvelope.decodeDirectly(bytes) {
        precondition((try? JobEnvelope.decodeWithFoundation(bytes)) == direct, "the direct envelope reader disagrees with JSONDecoder")
    }

    // The API's hygiene gate reads every request body before any parser. Its promise, checked as an
    // oracle: a JSON body it passes never decodes to a string (key or value) holding a NUL.
    _ = InputHygiene.formProblem(bytes, where: "form")
    if InputHygiene.jsonProblem(bytes) == nil, let value = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) {
        precondition(!containsNUL(value), "the hygiene gate passed a JSON text that decodes to a NUL")
    }

    // The batch endpoint's splitters (a JSON array's elements, NDJSON lines) and the importer's CSV
    // fields. Oracles: every element range lies inside the body, in order, and is itself valid
    // JSON whenever the whole array is.
    if let elements = BulkItems.arrayElements(bytes) {
        var end = 0
        for range in elements {
            precondition(range.lowerBound >= end && range.upperBound <= bytes.count, "a batch element outside the body")
            end = range.upperBound
        }
        if (try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)))?.arrayValue.map({ $0.count == elements.count }) == false {
            preconditionFailure("BulkItems.arrayElements disagrees with JSONDecoder on the number of elements")
        }
    }
    for (_, range) in BulkItems.lines(bytes) { precondition(range.upperBound <= bytes.count, "an NDJSON line outside the body") }
    if let fields = BulkItems.csvFields(bytes[...]) { precondition(!fields.isEmpty, "a CSV line of no field") }
    return 0
}

/// Every reader of a decoded JWS payload: the typed models, their accessors, the kind, and the
/// app checks the front door applies.
private func fuzzPayload(_ payload: JSONValue) {
    _ = JWSPayloadKind(payload)
    if let transaction = try? JWSTransactionPayload(json: payload) {
        _ = (transaction.purchaseDate, transaction.expiresDate, transaction.quantity, transaction.price, transaction.revocationDate)
        _ = InAppPurchase(serverAPITransaction: payload)
    }
    if let renewal = try? JWSRenewalInfoPayload(json: payload) {
        _ = (renewal.gracePeriodExpiresDate, renewal.autoRenewStatus, renewal.eligibleWinBackOfferIDs, renewal.renewalPrice)
    }
    if let notification = try? JWSNotificationPayload(json: payload) {
        _ = (notification.appAppleID, notification.status, notification.signedTransactionInfo, notification.environment)
    }
    _ = JWSExpectation(bundleIDs: ["com.example"], appAppleID: 1, environment: "Production").failure(for: payload)
}

private func containsNUL(_ value: JSONValue) -> Bool {
    switch value {
    case .string(let text): text.utf8.contains(0)
    case .array(let items): items.contains(where: containsNUL)
    case .object(let object): object.contains { $0.key.utf8.contains(0) || containsNUL($0.value) }
    case .null, .bool, .number: false
    }
}

/// The process entry point. SwiftPM (tools version 5.5 and later) links every executable target
/// with `--defsym main=<Module>_main`, expecting the Swift compiler to emit `<Module>_main`; with
/// `-parse-as-library` it emits none, so the link would fail. This stands in for it and hands
/// control to libFuzzer's driver, exactly as libFuzzer's own `main` does. (Where the toolchain does
/// not rename `main`, libFuzzer's `main` runs and this function is simply unused.)
@_cdecl("ReceiptDecoderFuzzer_main")
public func fuzzerMain(
    _ argc: CInt,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
) -> CInt {
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzz(UnsafeRawPointer(bitPattern: 1)!, 0) }
        return fuzz(UnsafeRawPointer(data), size)
    }
}
