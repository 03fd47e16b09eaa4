/// A command's input the app refuses, worded for the operator: the executable shows it as a usage
/// error (with the command's help, exit status 64), as it does its own argument errors.
public struct UsageError: Error, CustomStringConvertible, Equatable {
    /// The sentence the operator sees.
    public var description: String

    /// A usage error saying `description`.
    public init(_ description: String) { self.description = description }
}
