public enum Beryl {
    public static let version = "0.1.0"
}
