import Foundation
import ReceiptCore

/// The products and the entitlement catalogue of the app the conformance suite plays: one
/// subscription group of two levels, a non-consumable and a consumable. Product ids are suffixes
/// of the app's bundle id, so two runs against one database never share a product.
public struct ConformanceCatalogue: Sendable, Equatable {
    /// A product the model's customers buy.
    public enum Product: String, Sendable, CaseIterable {
        /// The monthly subscription (level 2 of the group): `pro`.
        case monthly
        /// The premium monthly subscription (level 1, an upgrade from `monthly`): `pro` and `premium`.
        case premium
        /// A non-consumable: `no_ads` for good.
        case lifetime
        /// A consumable: no entitlement (the app's backend counts coins itself).
        case coins

        /// Whether it is an auto-renewable subscription.
        public var isSubscription: Bool { self == .monthly || self == .premium }
    }

    public let bundleID: String

    /// Creates the catalogue of the app `bundleID`.
    public init(bundleID: String) { self.bundleID = bundleID }

    /// The App Store product id of `product`.
    public func productID(_ product: Product) -> String { "\(bundleID).\(product.rawValue)" }

    /// The entitlements the app defines (what `receiptq entitlements set` is given), by id.
    public var definitions: [EntitlementDefinition] {
        [
            EntitlementDefinition(id: "no_ads", products: [productID(.lifetime)]),
            EntitlementDefinition(id: "premium", products: [productID(.premium)]),
            EntitlementDefinition(id: "pro", products: [productID(.monthly), productID(.premium)]),
        ]
    }

    /// The entitlement ids `product` grants.
    public func entitlements(of product: Product) -> [String] {
        definitions.filter { $0.products.contains(productID(product)) }.map(\.id)
    }
}
