import Foundation
import OpenSSL
import ReceiptCore
import ReceiptSignature

extension ReceiptQueueApp {
    /// Why `receiptq receipt inspect` could not inspect its input; the message names what, never
    /// the input.
    public struct InspectionFailure: Error, CustomStringConvertible {
        /// What could not be inspected (`not a JWS (…)`, `cannot load trusted certificates from …`).
        public var description: String
    }

    /// `receiptq receipt inspect`: decodes a base64 receipt, or a JWS (a signed transaction, a
    /// renewal info, a notification's `signedPayload` or its JSON body), checks its signature and
    /// describes it.
    /// - Parameters:
    ///   - trustRoots: a directory of trusted PEM certificates (nil: `RECEIPTQ_TRUST_ROOTS_DIR`;
    ///     neither: the signature is not judged).
    ///   - judgeNow: judge certificates now instead of at the receipt's own date.
    /// - Returns: one JSON object, pretty-printed with sorted keys.
    /// - Throws: ``InspectionFailure`` when the certificates cannot be loaded or the input is
    ///   neither a receipt nor a JWS.
    public static func inspect(_ data: Data, trustRoots: String?, judgeNow: Bool) throws -> String {
        let directory = trustRoots ?? ProcessInfo.processInfo.environment["RECEIPTQ_TRUST_ROOTS_DIR"]
        var verifier: ReceiptSignatureVerifier?
        if let directory, !directory.isEmpty {
            do {
                verifier = ReceiptSignatureVerifier(trustStore: try TrustStore.load(directory: URL(fileURLWithPath: directory)))
            } catch {
                throw InspectionFailure(description: "cannot load trusted certificates from \(directory)")
            }
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if let jws = jws(in: text) {
            let jwsVerifier = try directory.flatMap { $0.isEmpty ? nil : $0 }.map {
                JWSVerifier(trustStore: try TrustStore.load(directory: URL(fileURLWithPath: $0)), time: judgeNow ? .now : .receiptDate)
            }
            do {
                return pretty(try JWSInspector.inspect(jws, verifier: jwsVerifier).json)
            } catch {
                throw InspectionFailure(description: "not a JWS (\(error.reason))")
            }
        }
        let inspected: JSONValue
        do {
            let bytes = try ReceiptDecoder.base64Bytes(String(decoding: data, as: UTF8.self))
            inspected = try ReceiptInspector.inspect(bytes: bytes, verifier: verifier, time: judgeNow ? .now : .receiptDate)
        } catch {
            throw InspectionFailure(description: "not an App Store receipt (\(error.reason))")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(inspected), as: UTF8.self)
    }

    /// The compact JWS in `text`: the text itself, or a notification body's `signedPayload`.
    static func jws(in text: String) -> String? {
        if CompactJWS.looksLikeJWS(text) { return text }
        guard text.hasPrefix("{"), let json = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)),
            let payload = json["signedPayload"]?.stringValue, CompactJWS.looksLikeJWS(payload)
        else { return nil }
        return payload
    }

    static func pretty(_ json: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(json)) ?? Data(), as: UTF8.self)
    }
}
