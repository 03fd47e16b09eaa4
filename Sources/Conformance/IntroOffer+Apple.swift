import Foundation
import ReceiptCore

extension IntroOffer {
    /// The offer's fields in a signed transaction, as Apple signs them (`offerType` 1
    /// introductory, 3 offer code, 4 win-back).
    var transactionFields: [String: JSONValue] {
        switch self {
        case .freeTrial: ["offerType": .number(1), "offerDiscountType": .string("FREE_TRIAL")]
        case .payUpFront: ["offerType": .number(1), "offerDiscountType": .string("PAY_UP_FRONT")]
        case .offerCode:
            ["offerType": .number(3), "offerIdentifier": .string("cf-offer-code"), "offerDiscountType": .string("PAY_AS_YOU_GO")]
        case .winBack: ["offerType": .number(4), "offerIdentifier": .string("cf-win-back"), "offerDiscountType": .string("PAY_AS_YOU_GO")]
        }
    }

    /// The first period's length under the offer.
    var firstPeriod: TimeInterval { self == .freeTrial ? Lifecycle.trialLength : Lifecycle.month }
}
